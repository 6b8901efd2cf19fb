// containerd 2 with its built-in plugins (the CRI among them), for the end-to-end suite's node.
package main

import (
	"context"
	"fmt"
	"os"

	_ "github.com/containerd/containerd/v2/cmd/containerd/builtins"
	"github.com/containerd/containerd/v2/cmd/containerd/command"
)

func main() {
	if err := command.App().Run(context.Background(), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "containerd:", err)
		os.Exit(1)
	}
}
