// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Feed watches Services, EndpointSlices, the metadata of pods with a
// sidecar and the nodes with a node-mode rdmagw through client-go's
// informers (one list and one watch each, for the whole cluster), and
// builds the services file from their caches.
type Feed struct {
	services   cache.SharedIndexInformer
	slices     cache.SharedIndexInformer
	pods       cache.SharedIndexInformer
	nodes      cache.SharedIndexInformer
	byResource map[string]cache.SharedIndexInformer // the four, by the resource's name
	factory    informers.SharedInformerFactory
	metadata   metadatainformer.SharedInformerFactory
	// The nodes': a factory's list options are every informer's of it.
	nodeFactory informers.SharedInformerFactory

	health rest.Interface // for /readyz, which every client may read

	changed chan struct{} // one pending wake-up is enough: the build reads the caches whole

	mu          sync.Mutex
	api         APIStatus
	watchErrors map[string]string // the last list or watch error, by resource

	refused refusalLog // addresses left out of the file, logged once per object version
}

func NewFeed(config *rest.Config) (*Feed, error) {
	// Protobuf for the typed objects: about half of JSON's bytes on the
	// wire, and cheaper for the API server to encode for a thousand agents.
	typed := rest.CopyConfig(config)
	typed.ContentType = "application/vnd.kubernetes.protobuf"
	typed.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(typed)
	if err != nil {
		return nil, err
	}
	metaClient, err := metadata.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	f := &Feed{changed: make(chan struct{}, 1), health: client.Discovery().RESTClient()}
	f.factory = informers.NewSharedInformerFactory(client, 0)
	f.services = f.factory.Core().V1().Services().Informer()
	f.slices = f.factory.Discovery().V1().EndpointSlices().Informer()
	// Only pods with the label, and only their metadata: the API server
	// filters, so the agent holds a few hundred bytes per sidecar pod, not
	// every pod of the cluster.
	f.metadata = metadatainformer.NewFilteredSharedInformerFactory(metaClient, 0, metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = SidecarLabel })
	f.pods = f.metadata.ForResource(corev1.SchemeGroupVersion.WithResource("pods")).Informer()
	// Only nodes with the label, filtered by the API server too: a Node is
	// large (its images, its conditions) and its status changes every few
	// seconds, while a cluster has few node-mode rdmagw, if any.
	f.nodeFactory = informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = NodeModeLabel }))
	f.nodes = f.nodeFactory.Core().V1().Nodes().Informer()

	wake := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { f.wake() },
		UpdateFunc: func(any, any) { f.wake() },
		DeleteFunc: func(any) { f.wake() },
	}
	f.byResource = map[string]cache.SharedIndexInformer{"services": f.services, "endpointslices": f.slices, "pods": f.pods,
		"nodes": f.nodes}
	for resource, informer := range f.byResource {
		transform := slim
		if resource == "nodes" {
			transform = slimNode
		}
		if err := informer.SetTransform(transform); err != nil {
			return nil, err
		}
		if _, err := informer.AddEventHandler(wake); err != nil {
			return nil, err
		}
		// Called on every failed list or watch, before client-go retries
		// with backoff: the API server is unreachable, or refuses us.
		if err := informer.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
			f.watchFailed(resource, err)
		}); err != nil {
			return nil, err
		}
	}
	f.watchErrors = map[string]string{}
	f.api = APIStatus{Reachable: false, Since: now()}
	return f, nil
}

// slim drops, before an object enters the cache, the metadata the file never
// uses: managed fields and annotations (a kubectl-applied object carries its
// whole last configuration in one) are most of a small object's size, and
// an agent caches every Service and EndpointSlice of the cluster.
func slim(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
		m.SetAnnotations(nil)
		m.SetOwnerReferences(nil)
	}
	return obj, nil
}

// slimNode keeps of a Node what BuildNodes reads: its name, its version (a
// refusal names it), NodeModeLabel, TunnelAnnotation and its addresses. The
// rest (images, conditions, capacity) is most of a Node's size.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion}}
	if v, has := n.Labels[NodeModeLabel]; has {
		out.Labels = map[string]string{NodeModeLabel: v}
	}
	if v, has := n.Annotations[TunnelAnnotation]; has {
		out.Annotations = map[string]string{TunnelAnnotation: v}
	}
	out.Status.Addresses = n.Status.Addresses
	return out, nil
}

func now() string { return time.Now().UTC().Format(time.RFC3339) }

func (f *Feed) wake() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// reachable and unreachable follow the /readyz probe; the file changes only
// when the answer does.
func (f *Feed) reachable() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.api.Reachable {
		if f.api.Error != "" {
			logEvent("info", "api_reachable", "unreachable_since", f.api.Since)
		}
		f.api = APIStatus{Reachable: true, Since: now()}
		f.wake()
	}
}

func (f *Feed) unreachable(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.api.Reachable || f.api.Error == "" {
		// An API server that answers but is not ready quotes its whole
		// check list; the file keeps the start of it (rdmagw cuts at 1 KiB).
		f.api = APIStatus{Reachable: false, Since: now(), Error: shorten(err.Error(), maxErrorBytes)}
		logEvent("warn", "api_unreachable", "error", err.Error())
		f.wake()
	}
}

func (f *Feed) watchFailed(resource string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// client-go retries with backoff: one line per new error, not per retry.
	if msg := err.Error(); f.watchErrors[resource] != msg {
		f.watchErrors[resource] = msg
		logEvent("warn", "watch_failed", "resource", resource, "error", msg)
	}
}

// Start runs the informers and waits (up to timeout) for their first lists.
func (f *Feed) Start(ctx context.Context, timeout time.Duration) error {
	f.factory.Start(ctx.Done())
	f.metadata.Start(ctx.Done())
	f.nodeFactory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), f.services.HasSynced, f.slices.HasSynced, f.pods.HasSynced,
		f.nodes.HasSynced) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var why []string
		for _, resource := range []string{"services", "endpointslices", "pods", "nodes"} {
			if f.byResource[resource].HasSynced() {
				continue
			}
			reason := f.watchErrors[resource]
			if reason == "" {
				reason = "no answer"
			}
			why = append(why, resource+": "+reason)
		}
		return fmt.Errorf("the first list did not finish within %s: %s", timeout, strings.Join(why, "; "))
	}
	f.reachable()
	go f.probe(ctx, 2*time.Second)
	return nil
}

// probe asks /readyz every interval. A watch that reconnects after an outage
// brings no event when nothing changed meanwhile, so the events alone cannot
// tell that the API server is back; and a watch error may come only after
// a long read timeout.
func (f *Feed) probe(ctx context.Context, interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		reqCtx, cancel := context.WithTimeout(ctx, interval)
		err := f.health.Get().AbsPath("/readyz").Do(reqCtx).Error()
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			f.unreachable(err)
		} else {
			f.reachable()
		}
	}
}

// Build reads the informers' caches.
func (f *Feed) Build() File {
	services := listAll[corev1.Service](f.services)
	slices := listAll[discoveryv1.EndpointSlice](f.slices)
	pods := map[string]bool{}
	for _, obj := range f.pods.GetStore().List() {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			if _, has := m.Labels[SidecarLabel]; has {
				pods[m.Namespace+"/"+m.Name] = true
			}
		}
	}
	f.mu.Lock()
	api := f.api
	f.mu.Unlock()
	built, refused := BuildServices(services, slices, pods)
	nodes, nodesRefused := BuildNodes(listAll[corev1.Node](f.nodes))
	f.refused.report(append(refused, nodesRefused...))
	return File{Format: FileFormat, API: api, Nodes: nodes, Services: built}
}

// Run rewrites path whenever what it would hold changes, at most once per
// settle interval (a burst of events makes one write), until ctx ends; and
// tablePath, when given, with the same content as a services table (table.go).
func (f *Feed) Run(ctx context.Context, path, tablePath string, settle time.Duration) error {
	var last []byte
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.changed:
		}
		// Let a burst (a rollout's many slice updates) land first.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(settle):
		}
		file := f.Build()
		// Compact: at 10,000 Services indenting took four times as long as
		// the rest of the encoding (--once indents, for people).
		data, err := json.Marshal(file)
		if err != nil {
			return err
		}
		data = append(data, '\n')
		if bytes.Equal(data, last) {
			continue
		}
		if err := writeTable(tablePath, file); err != nil {
			logEvent("error", "services_write_failed", "path", tablePath, "error", err.Error())
			time.AfterFunc(time.Second, f.wake)
			continue
		}
		if err := writeAtomically(path, data); err != nil {
			// The last file stays in place; try again in a second.
			logEvent("error", "services_write_failed", "path", path, "error", err.Error())
			time.AfterFunc(time.Second, f.wake)
			continue
		}
		last = data
		logEvent("info", "services_written", "path", path, "services", len(file.Services),
			"endpoints", countEndpoints(file.Services), "api_reachable", file.API.Reachable)
	}
}

// writeTable replaces path (none: nothing to do) with file as a table.
func writeTable(path string, file File) error {
	if path == "" {
		return nil
	}
	table, err := EncodeTable(file)
	if err != nil {
		return err
	}
	return writeAtomically(path, table)
}

func countEndpoints(services []Service) int {
	n := 0
	for _, s := range services {
		for _, p := range s.Ports {
			n += len(p.Endpoints)
		}
	}
	return n
}

// writeAtomically replaces path by rename, so a sidecar reading it sees the
// old file or the new one, never half of one.
func writeAtomically(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	// Readable by the sidecars' uid, whatever it is: addresses, no secrets.
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// listAll returns the objects of type T in an informer's cache.
func listAll[T any](informer cache.SharedIndexInformer) []*T {
	out := []*T{}
	_ = cache.ListAll(informer.GetIndexer(), labels.Everything(), func(obj any) {
		if o, ok := obj.(*T); ok {
			out = append(out, o)
		}
	})
	return out
}

// maxErrorBytes bounds the API error the file carries.
const maxErrorBytes = 512

// shorten cuts s to at most n bytes, at a character boundary, marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	end := 0
	for i := range s {
		if i > n {
			break
		}
		end = i
	}
	return s[:end] + "..."
}
