// Command nvme-dra-driver is the kubelet plugin of the reference NVMe DRA driver for
// KubeVirt passthrough.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	metadatav1alpha1 "k8s.io/dynamic-resource-allocation/api/metadata/v1alpha1"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/kubevirt-dra-conformance/driver/pkg/cdi"
	"github.com/kubevirt-dra-conformance/driver/pkg/driver"
	"github.com/kubevirt-dra-conformance/driver/pkg/inventory"
	"github.com/kubevirt-dra-conformance/driver/pkg/pci"
)

const defaultDriverName = "nvme.dra.kubevirt-conformance.io"

type flags struct {
	driverName, nodeName, kubeconfig              string
	sysfsRoot, devRoot, cdiDir, hostProc          string
	kubeletDir, pluginDir, registrarDir, stateDir string
	readyAddr, probe, podUID                      string
	numaList                                      bool
	rescanInterval, bindSettle, healthInterval    time.Duration
}

func parseFlags() flags {
	var f flags
	flag.StringVar(&f.driverName, "driver-name", defaultDriverName, "DRA driver name")
	flag.StringVar(&f.nodeName, "node-name", os.Getenv("NODE_NAME"), "node this plugin serves")
	flag.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig (in-cluster config when empty)")
	flag.StringVar(&f.podUID, "pod-uid", os.Getenv("POD_UID"),
		"this pod's UID (downward API metadata.uid): sockets named per pod, so a rolling update can overlap")
	flag.StringVar(&f.sysfsRoot, "sysfs-root", "/sys", "sysfs root (an emulated tree in tests)")
	flag.StringVar(&f.devRoot, "dev-root", "/dev", "host /dev as the runtime sees it (for CDI host paths)")
	flag.StringVar(&f.cdiDir, "cdi-dir", "/var/run/cdi", "CDI spec directory")
	flag.StringVar(&f.hostProc, "host-proc", "/proc", "host /proc (mounts and swaps of the node)")
	flag.StringVar(&f.kubeletDir, "kubelet-dir", "/var/lib/kubelet", "the kubelet's root dir")
	flag.StringVar(&f.pluginDir, "plugin-dir", "", "plugin data dir (default <kubelet-dir>/plugins/<driver>)")
	flag.StringVar(&f.registrarDir, "registrar-dir", "", "plugin registry dir (default <kubelet-dir>/plugins_registry)")
	flag.StringVar(&f.stateDir, "state-dir", "", "checkpoint dir (default: plugin dir)")
	flag.StringVar(&f.readyAddr, "ready-address", "unix:/run/nvme-dra/ready.sock", "/readyz endpoint: unix:PATH or host:port")
	flag.StringVar(&f.probe, "probe", "", "probe a running driver's ready endpoint at this address and exit")
	flag.DurationVar(&f.rescanInterval, "rescan-interval", 10*time.Second, "how often sysfs is re-read")
	flag.DurationVar(&f.bindSettle, "bind-settle", 5*time.Second, "how long a driver bind may take to show in sysfs")
	flag.BoolVar(&f.numaList, "numa-list-attribute", false,
		"publish resource.kubernetes.io/numaNode as a list (only where the cluster enables DRAListTypeAttributes)")
	flag.DurationVar(&f.healthInterval, "health-interval", 10*time.Second, "how often device health is checked and sent to the kubelet")
	klog.InitFlags(nil)
	flag.Parse()
	if f.pluginDir == "" {
		f.pluginDir = filepath.Join(f.kubeletDir, "plugins", f.driverName)
	}
	if f.registrarDir == "" {
		f.registrarDir = filepath.Join(f.kubeletDir, "plugins_registry")
	}
	if f.stateDir == "" {
		f.stateDir = f.pluginDir
	}
	return f
}

func main() {
	f := parseFlags()
	if f.probe != "" {
		if err := probe(f.probe); err != nil {
			fmt.Fprintln(os.Stderr, "not ready:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(f); err != nil {
		klog.ErrorS(err, "driver stopped")
		os.Exit(1)
	}
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}

func run(f flags) error {
	if f.nodeName == "" {
		return fmt.Errorf("no node name: pass --node-name or set NODE_NAME (downward API spec.nodeName)")
	}
	if f.healthInterval <= 0 || f.rescanInterval <= 0 {
		return fmt.Errorf("--health-interval and --rescan-interval must be positive, got %s and %s",
			f.healthInterval, f.rescanInterval)
	}
	numaForm := deviceattribute.ScalarAttribute
	if f.numaList {
		numaForm = deviceattribute.ListAttribute
	}
	signals, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// A fatal error from the helper cancels everything; run returns it, so the plugin
	// exits non-zero and is restarted.
	ctx, fail := context.WithCancelCause(signals)
	defer fail(nil)
	logger := klog.FromContext(ctx)

	cfg, err := restConfig(f.kubeconfig)
	if err != nil {
		return fmt.Errorf("API client config: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, dir := range []string{f.pluginDir, f.registrarDir, f.stateDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	specs := cdi.Spec{Vendor: f.driverName, Dir: f.cdiDir, DevRoot: f.devRoot}
	checkpoint, err := driver.LoadCheckpoint(ctx, filepath.Join(f.stateDir, "checkpoint.json"), f.driverName, specs)
	if err != nil {
		return err
	}
	sys := pci.Sysfs{Root: f.sysfsRoot}
	drv := driver.New(driver.Config{
		DriverName: f.driverName,
		NodeName:   f.nodeName,
		Sysfs:      sys,
		Binder:     pci.Binder{Sysfs: sys, Settle: f.bindSettle},
		Host: inventory.Host{
			MountsFile: filepath.Join(f.hostProc, "1", "mounts"),
			SwapsFile:  filepath.Join(f.hostProc, "swaps"),
		},
		CDI:            specs,
		Checkpoint:     checkpoint,
		Fatal:          fail,
		NUMAForm:       numaForm,
		HealthInterval: f.healthInterval,
	})
	devices, _, err := drv.Rescan(ctx)
	if err != nil {
		return err
	}
	options := []kubeletplugin.Option{
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(f.nodeName),
		kubeletplugin.DriverName(f.driverName),
		kubeletplugin.PluginDataDirectoryPath(f.pluginDir),
		kubeletplugin.RegistrarDirectoryPath(f.registrarDir),
		kubeletplugin.CDIDirectory(f.cdiDir),
		kubeletplugin.EnableDeviceMetadata(true, []schema.GroupVersion{
			metadatav1beta1.SchemeGroupVersion, metadatav1alpha1.SchemeGroupVersion,
		}),
	}
	if f.podUID != "" {
		options = append(options, kubeletplugin.RollingUpdate(types.UID(f.podUID)))
	}
	helper, err := kubeletplugin.Start(ctx, drv, options...)
	if err != nil {
		return fmt.Errorf("starting kubelet plugin: %w", err)
	}
	defer helper.Stop()
	if err := helper.PublishResources(ctx, drv.Resources(devices)); err != nil {
		return fmt.Errorf("publishing ResourceSlices: %w", err)
	}
	logger.Info("driver started", "node", f.nodeName, "devices", len(devices),
		"prepared claims", len(checkpoint.UIDs()))

	var ready atomic.Bool
	ready.Store(true)
	go serveReady(ctx, f.readyAddr, helper, &ready)

	ticker := time.NewTicker(f.rescanInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) {
				return cause
			}
			return nil
		case <-ticker.C:
			devices, changed, err := drv.Rescan(ctx)
			if err != nil {
				logger.Error(err, "rescan failed")
				ready.Store(false)
				continue
			}
			ready.Store(true)
			if changed {
				logger.Info("devices changed, re-publishing", "devices", len(devices))
				if err := helper.PublishResources(ctx, drv.Resources(devices)); err != nil {
					logger.Error(err, "re-publishing failed")
				}
			}
		}
	}
}

// serveReady answers /readyz: 200 once the kubelet registered the plugin and sysfs reads.
func serveReady(ctx context.Context, addr string, helper *kubeletplugin.Helper, ready *atomic.Bool) {
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		status := helper.RegistrationStatus()
		if !ready.Load() || status == nil || !status.PluginRegistered {
			http.Error(w, "not registered with the kubelet yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	listener, err := listen(addr)
	if err != nil {
		klog.ErrorS(err, "ready endpoint not started")
		return
	}
	go func() {
		<-ctx.Done()
		_ = server.Close()
	}()
	if err := server.Serve(listener); err != nil && err != http.ErrServerClosed {
		klog.ErrorS(err, "ready endpoint stopped")
	}
}

// listen opens "unix:PATH" (one per pod: works with and without host networking) or a
// TCP "host:port".
func listen(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		_ = os.Remove(path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", addr)
}

// probe is the readiness probe: GET /readyz on a running driver.
func probe(addr string) error {
	transport := &http.Transport{}
	url := "http://" + addr + "/readyz"
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		transport.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}
		url = "http://driver/readyz"
	}
	client := &http.Client{Transport: transport, Timeout: 3 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return nil
}
