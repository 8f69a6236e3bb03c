// Command dra-sanity is the driver sanity suite's client for any DRA kubelet plugin:
// it calls NodePrepareResources / NodeUnprepareResources on the plugin socket, as the
// kubelet would, and prints the response as JSON for pytest to check.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

func parseClaims(specs []string) ([]*drapb.Claim, error) {
	out := make([]*drapb.Claim, 0, len(specs))
	for _, spec := range specs {
		parts := strings.Split(spec, "/")
		if len(parts) != 3 {
			return nil, fmt.Errorf("claim %q: want namespace/name/uid", spec)
		}
		out = append(out, &drapb.Claim{Namespace: parts[0], Name: parts[1], Uid: parts[2]})
	}
	return out, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "resolve" {
		resolve(os.Args[2:])
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "metadata" {
		metadataCommand(os.Args[2:])
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "stat" {
		emit(statNodes(os.Args[2:]))
		return
	}
	socket := flag.String("socket", "", "the plugin's DRA socket (default: as registered)")
	driver := flag.String("driver", "", "find the socket of this driver's registered plugin")
	registry := flag.String("registry", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registry")
	timeout := flag.Duration("timeout", 60*time.Second, "per-call timeout")
	parallel := flag.Bool("parallel", false, "send one call per claim, all at once (concurrency check)")
	flag.Parse()
	if (*socket == "") == (*driver == "") || flag.NArg() < 2 {
		fmt.Fprintln(os.Stderr, "usage: dra-sanity --socket PATH|--driver NAME [--registry DIR] "+
			"prepare|unprepare NS/NAME/UID...\n"+
			"       dra-sanity resolve --cdi-dir DIR[,DIR] CDI-ID...\n"+
			"       dra-sanity metadata FILE...\n"+
			"       dra-sanity stat PATH...")
		os.Exit(2)
	}
	claims, err := parseClaims(flag.Args()[1:])
	if err != nil {
		fail(err)
	}
	if *socket == "" {
		if *socket, err = endpointFromRegistry(*registry, *driver, *timeout); err != nil {
			fail(err)
		}
	}
	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fail(err)
	}
	defer func() { _ = conn.Close() }()
	client := drapb.NewDRAPluginClient(conn)
	call := func(batch []*drapb.Claim) (any, error) {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		switch flag.Arg(0) {
		case "prepare":
			return client.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: batch})
		case "unprepare":
			return client.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: batch})
		}
		return nil, fmt.Errorf("unknown verb %q", flag.Arg(0))
	}
	if !*parallel {
		emit(answer(call(claims)))
		return
	}
	answers := make([]any, len(claims))
	var wg sync.WaitGroup
	for i, c := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = answer(call([]*drapb.Claim{c}))
		}()
	}
	wg.Wait()
	emit(map[string]any{"responses": answers})
}

// answer is a call's response, or its gRPC error as data: an error answer is part of
// the plugin's contract (the kubelet fails the pod either way), not a client failure.
func answer(resp any, err error) any {
	if err == nil {
		return resp
	}
	s := status.Convert(err)
	return map[string]any{"grpcError": map[string]string{"code": s.Code().String(), "message": s.Message()}}
}

func emit(v any) {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(v); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "dra-sanity:", err)
	os.Exit(1)
}

// resolve loads the CDI specs of the given directories with the CDI library, as the
// container runtime does, and reports for each device id (default: every device the
// specs define) whether it resolves and the edits it carries.
func resolve(args []string) {
	fs := flag.NewFlagSet("resolve", flag.ExitOnError)
	dirs := fs.String("cdi-dir", "/etc/cdi,/var/run/cdi", "comma-separated CDI spec dirs")
	_ = fs.Parse(args)
	report, err := resolveDevices(strings.Split(*dirs, ","), fs.Args())
	if err != nil {
		fail(err)
	}
	emit(report)
}

// resolveDevices is resolve's report: each device id (default: every device the specs
// define) with whether it resolves and the edits the runtime would apply for it.
func resolveDevices(dirs, ids []string) (map[string]any, error) {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, err
	}
	specErrors := map[string][]string{}
	for path, errs := range cache.GetErrors() {
		for _, e := range errs {
			specErrors[path] = append(specErrors[path], e.Error())
		}
	}
	devices := map[string]any{}
	if len(ids) == 0 { // every device the specs define: what is prepared on the node
		ids = cache.ListDevices()
	}
	for _, id := range ids {
		dev := cache.GetDevice(id)
		if dev == nil {
			devices[id] = map[string]any{"found": false}
			continue
		}
		// What the runtime applies for the device: the spec's own edits, then the device's.
		env := []string{}
		nodes := []map[string]string{}
		for _, edits := range []specs.ContainerEdits{dev.GetSpec().ContainerEdits, dev.ContainerEdits} {
			env = append(env, edits.Env...)
			for _, n := range edits.DeviceNodes {
				// Where the runtime takes each node from: its hostPath, or its path when none.
				host := n.HostPath
				if host == "" {
					host = n.Path
				}
				nodes = append(nodes, map[string]string{"path": n.Path, "hostPath": host})
			}
		}
		devices[id] = map[string]any{
			"found": true, "spec": dev.GetSpec().GetPath(), "env": env, "deviceNodes": nodes,
		}
	}
	return map[string]any{"devices": devices, "specErrors": specErrors}, nil
}
