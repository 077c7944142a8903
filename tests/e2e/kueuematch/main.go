// Command kueuematch asks Kueue's own flavor assigner (sigs.k8s.io/kueue
// pkg/scheduler/flavorassigner, the code Kueue's scheduler runs to admit a workload) which
// ResourceFlavors it would give a workload. Kueue matches a pod set's node affinity and node
// selector against a flavor's nodeLabels, keeping only the keys the flavors of the resource
// group declare (kueue#15136): what cudasched's generated flavors let Kueue see of a CUDA
// requirement is decided there, so the tests ask that code rather than a copy of its rules.
//
// Input (JSON on stdin): {"flavors": [ResourceFlavor...], "clusterQueue": ClusterQueue,
// "workloads": {name: PodTemplateSpec}}; each workload is one pod set of one pod. Output: per
// workload, "assigned" (the flavor Kueue picks with the ClusterQueue as given, "" for none),
// "accepts" (every flavor Kueue would admit it to: the ClusterQueue run once per flavor with
// that flavor's quota ample and every other flavor's quota zero, so only the flavor's labels
// and taints decide), "refusals" ({flavor: Kueue's reasons} for the others) and "labelKeys"
// (the keys Kueue keeps of the affinity for the GPU resource group).
//
// It runs the whole assigner (flavorassigner.New(...).Assign) over a scheduler cache snapshot
// built the way Kueue's own unit tests build it (pkg/util/testing.NewFakeClient): no API
// server, no controller. Its own Go module, so Kueue's Kubernetes libraries do not move the
// control plane's pins (tests/e2e/go.mod).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	schdcache "sigs.k8s.io/kueue/pkg/cache/scheduler"
	"sigs.k8s.io/kueue/pkg/resources"
	"sigs.k8s.io/kueue/pkg/scheduler/flavorassigner"
	preemptioncommon "sigs.k8s.io/kueue/pkg/scheduler/preemption/common"
	utiltesting "sigs.k8s.io/kueue/pkg/util/testing"
	"sigs.k8s.io/kueue/pkg/workload"
)

type input struct {
	Flavors      []kueue.ResourceFlavor            `json:"flavors"`
	ClusterQueue kueue.ClusterQueue                `json:"clusterQueue"`
	Workloads    map[string]corev1.PodTemplateSpec `json:"workloads"`
}

type verdict struct {
	Assigned  string            `json:"assigned"`
	Accepts   []string          `json:"accepts"`
	Refusals  map[string]string `json:"refusals"`
	LabelKeys []string          `json:"labelKeys"`
}

// noPreemption answers Kueue's preemption question for a flavor whose quota does not fit:
// no workload is running, so there is nothing to preempt.
type noPreemption struct{}

func (noPreemption) SimulatePreemption(logr.Logger, *schdcache.ClusterQueueSnapshot, workload.Info, resources.FlavorResource, int64) (preemptioncommon.PreemptionPossibility, int) {
	return preemptioncommon.NoCandidates, 0
}

// ample is a quota no test workload reaches.
var ample = resource.MustParse("1000000")

// only is cq with every flavor's quota zero except name's, which is ample.
func only(cq kueue.ClusterQueue, name string) *kueue.ClusterQueue {
	out := cq.DeepCopy()
	for g := range out.Spec.ResourceGroups {
		for f := range out.Spec.ResourceGroups[g].Flavors {
			flavor := &out.Spec.ResourceGroups[g].Flavors[f]
			for r := range flavor.Resources {
				if string(flavor.Name) == name {
					flavor.Resources[r].NominalQuota = ample
				} else {
					flavor.Resources[r].NominalQuota = resource.MustParse("0")
				}
			}
		}
	}
	return out
}

// defaultRequests sets a container's missing requests to its limits, as the API server does
// when it stores a pod (an extended resource such as nvidia.com/gpu is often given as a limit
// only); Kueue reads the requests of the pods it is shown.
func defaultRequests(spec *corev1.PodSpec) {
	for _, containers := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range containers {
			res := &containers[i].Resources
			for name, limit := range res.Limits {
				if _, ok := res.Requests[name]; !ok {
					if res.Requests == nil {
						res.Requests = corev1.ResourceList{}
					}
					res.Requests[name] = limit
				}
			}
		}
	}
}

type outcome struct {
	assigned  string
	message   string
	reasons   map[string]string // flavor -> Kueue's reasons for not assigning it
	labelKeys []string
}

// assign runs Kueue's flavor assigner for one workload against one ClusterQueue.
func assign(ctx context.Context, in *input, cq *kueue.ClusterQueue, tmpl corev1.PodTemplateSpec) (outcome, error) {
	log := logr.Discard()
	cache := schdcache.New(utiltesting.NewFakeClient())
	flavors := map[kueue.ResourceFlavorReference]*kueue.ResourceFlavor{}
	for i := range in.Flavors {
		rf := &in.Flavors[i]
		cache.AddOrUpdateResourceFlavor(log, rf)
		flavors[kueue.ResourceFlavorReference(rf.Name)] = rf
	}
	if err := cache.AddClusterQueue(ctx, cq); err != nil {
		return outcome{}, fmt.Errorf("adding the ClusterQueue: %w", err)
	}
	snapshot, err := cache.Snapshot(ctx)
	if err != nil {
		return outcome{}, fmt.Errorf("snapshot: %w", err)
	}
	cqs := snapshot.ClusterQueue(kueue.ClusterQueueReference(cq.Name))
	if cqs == nil {
		return outcome{}, fmt.Errorf("the ClusterQueue %q is not in Kueue's snapshot (inactive?)", cq.Name)
	}
	tmpl = *tmpl.DeepCopy()
	defaultRequests(&tmpl.Spec)
	wl := workload.NewInfo(&kueue.Workload{Spec: kueue.WorkloadSpec{PodSets: []kueue.PodSet{
		{Name: kueue.PodSetReference("main"), Count: 1, Template: tmpl},
	}}})
	assignment := flavorassigner.New(wl, cqs, flavors, false, noPreemption{}, nil).Assign(log, nil)
	out := outcome{message: assignment.Message(), reasons: map[string]string{}}
	for _, ps := range assignment.PodSets {
		for _, attempt := range ps.FlavorAssignmentAttempts {
			if len(attempt.Reasons) > 0 {
				out.reasons[string(attempt.Flavor)] = strings.Join(attempt.Reasons, "; ")
			}
		}
	}
	if rg := cqs.RGByResource(corev1.ResourceName("nvidia.com/gpu")); rg != nil {
		out.labelKeys = rg.LabelKeys.UnsortedList()
		sort.Strings(out.labelKeys)
	}
	if assignment.RepresentativeMode() == flavorassigner.Fit {
		for _, ps := range assignment.PodSets {
			for _, fa := range ps.Flavors {
				out.assigned = string(fa.Name)
			}
		}
	}
	return out, nil
}

func judge(ctx context.Context, in *input, tmpl corev1.PodTemplateSpec) (verdict, error) {
	asGiven, err := assign(ctx, in, &in.ClusterQueue, tmpl)
	if err != nil {
		return verdict{}, err
	}
	v := verdict{Assigned: asGiven.assigned, Accepts: []string{}, Refusals: map[string]string{}, LabelKeys: asGiven.labelKeys}
	for _, rg := range in.ClusterQueue.Spec.ResourceGroups {
		for _, fq := range rg.Flavors {
			flavor := string(fq.Name)
			alone, err := assign(ctx, in, only(in.ClusterQueue, flavor), tmpl)
			if err != nil {
				return verdict{}, err
			}
			if alone.assigned == flavor {
				v.Accepts = append(v.Accepts, flavor)
			} else if why, ok := alone.reasons[flavor]; ok {
				v.Refusals[flavor] = why
			} else {
				v.Refusals[flavor] = alone.message
			}
		}
	}
	return v, nil
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "kueuematch: reading the input:", err)
		os.Exit(2)
	}
	if len(in.Flavors) == 0 || len(in.Workloads) == 0 || in.ClusterQueue.Name == "" {
		fmt.Fprintln(os.Stderr, "kueuematch: the input needs flavors, a named clusterQueue and workloads")
		os.Exit(2)
	}
	ctx := context.Background()
	out := map[string]verdict{}
	for name, tmpl := range in.Workloads {
		v, err := judge(ctx, &in, tmpl)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kueuematch: %s: %v\n", name, err)
			os.Exit(2)
		}
		out[name] = v
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "kueuematch:", err)
		os.Exit(1)
	}
}
