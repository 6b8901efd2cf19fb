// kube-scheduler as the release ships it, for the end-to-end suite's node.
package main

import (
	"os"
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
