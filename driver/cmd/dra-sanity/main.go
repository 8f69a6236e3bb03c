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
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
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
	socket := flag.String("socket", "", "the plugin's dra.sock")
	timeout := flag.Duration("timeout", 60*time.Second, "per-call timeout")
	parallel := flag.Bool("parallel", false, "send one call per claim, all at once (concurrency check)")
	flag.Parse()
	if *socket == "" || flag.NArg() < 2 {
		fmt.Fprintln(os.Stderr, "usage: dra-sanity --socket PATH prepare|unprepare NS/NAME/UID...")
		os.Exit(2)
	}
	claims, err := parseClaims(flag.Args()[1:])
	if err != nil {
		fail(err)
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
		resp, err := call(claims)
		if err != nil {
			fail(err)
		}
		emit(resp)
		return
	}
	responses := make([]any, len(claims))
	errs := make([]string, len(claims))
	var wg sync.WaitGroup
	for i, c := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := call([]*drapb.Claim{c})
			responses[i] = resp
			if err != nil {
				errs[i] = err.Error()
			}
		}()
	}
	wg.Wait()
	emit(map[string]any{"responses": responses, "errors": errs})
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
