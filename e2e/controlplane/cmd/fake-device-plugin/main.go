// A device plugin for the end-to-end suite's node: it advertises resources whose devices are
// all /dev/null (no GPU, no RDMA NIC), so that pods asking for nvidia.com/gpu or an RDMA
// resource are scheduled and started, and a container can see what it was allocated: one
// device node per device (char 1:3, /dev/null's) at the path the flag names, and an env
// variable listing the allocated device IDs.
//
//	fake-device-plugin --plugin-dir <kubelet root>/device-plugins \
//	    --resource nvidia.com/gpu=4:/dev/nvidia%d:NVIDIA_VISIBLE_DEVICES \
//	    --resource aliyun/erdma=2:/dev/infiniband/uverbs%d:FAKE_ERDMA_DEVICES
//
// Each resource is served on a socket of its own in the plugin dir and registered with the
// kubelet there (kubelet.sock). It runs until SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type resource struct {
	name    string
	count   int
	pathFmt string // container path of device i, e.g. /dev/nvidia%d
	env     string // env variable that lists the allocated IDs
}

func (r resource) id(i int) string {
	return fmt.Sprintf("fake-%s-%d", r.name[strings.LastIndex(r.name, "/")+1:], i)
}

// index returns i for the ID of device i.
func (r resource) index(id string) (int, error) {
	return strconv.Atoi(id[strings.LastIndex(id, "-")+1:])
}

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	res  resource
	done chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	devices := make([]*pluginapi.Device, p.res.count)
	for i := range devices {
		devices[i] = &pluginapi.Device{ID: p.res.id(i), Health: pluginapi.Healthy}
	}
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devices}); err != nil {
		return err
	}
	select { // the list never changes
	case <-p.done:
	case <-stream.Context().Done():
	}
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, creq := range req.ContainerRequests {
		ids := append([]string(nil), creq.DevicesIds...)
		sort.Strings(ids)
		c := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{p.res.env: strings.Join(ids, ",")}}
		for _, id := range ids {
			i, err := p.res.index(id)
			if err != nil || i < 0 || i >= p.res.count {
				return nil, fmt.Errorf("%s: no device %q", p.res.name, id)
			}
			c.Devices = append(c.Devices, &pluginapi.DeviceSpec{
				ContainerPath: fmt.Sprintf(p.res.pathFmt, i), HostPath: "/dev/null", Permissions: "rw"})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, c)
	}
	fmt.Printf("allocate %s: %v\n", p.res.name, req.ContainerRequests)
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// parse reads NAME=COUNT:PATHFMT:ENV.
func parse(spec string) (resource, error) {
	name, rest, ok := strings.Cut(spec, "=")
	parts := strings.Split(rest, ":")
	if !ok || len(parts) != 3 || !strings.Contains(parts[1], "%d") || parts[2] == "" {
		return resource{}, fmt.Errorf("--resource %q: want NAME=COUNT:PATHFMT:ENV", spec)
	}
	count, err := strconv.Atoi(parts[0])
	if err != nil || count < 1 {
		return resource{}, fmt.Errorf("--resource %q: bad count", spec)
	}
	return resource{name: name, count: count, pathFmt: parts[1], env: parts[2]}, nil
}

type resourceFlags []resource

func (f *resourceFlags) String() string { return fmt.Sprint(*f) }
func (f *resourceFlags) Set(s string) error {
	r, err := parse(s)
	if err == nil {
		*f = append(*f, r)
	}
	return err
}

func serveAndRegister(dir string, res resource, done chan struct{}) (*grpc.Server, error) {
	socket := "fake-" + strings.NewReplacer("/", "-", ".", "-").Replace(res.name) + ".sock"
	path := filepath.Join(dir, socket)
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, &plugin{res: res, done: done})
	go func() { _ = srv.Serve(lis) }()

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: socket, ResourceName: res.name,
		Options: &pluginapi.DevicePluginOptions{}})
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("register %s with the kubelet: %w", res.name, err)
	}
	fmt.Printf("registered %s: %d devices at %s, env %s\n", res.name, res.count, res.pathFmt, res.env)
	return srv, nil
}

func main() {
	dir := flag.String("plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugins directory")
	var resources resourceFlags
	flag.Var(&resources, "resource", "NAME=COUNT:PATHFMT:ENV (repeatable)")
	flag.Parse()
	if len(resources) == 0 {
		fmt.Fprintln(os.Stderr, "fake-device-plugin: no --resource")
		os.Exit(2)
	}
	done := make(chan struct{})
	var servers []*grpc.Server
	for _, res := range resources {
		srv, err := serveAndRegister(*dir, res, done)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake-device-plugin:", err)
			os.Exit(1)
		}
		servers = append(servers, srv)
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
	close(done)
	for _, srv := range servers {
		srv.Stop()
	}
}
