// Command affinitymatch times kube-scheduler's own node-affinity matching: the
// k8s.io/component-helpers/scheduling/corev1/nodeaffinity code that the scheduler's NodeAffinity
// plugin runs, once per pod in PreFilter (GetRequiredNodeAffinity) and once per node in Filter
// (Match). benchmarks/controlplane/match.py feeds it the fleet's nodes and the pod affinities it
// schedules, as JSON on stdin ({"nodes": [Node...], "affinities": {name: Affinity}}), and reads
// per affinity the nanoseconds per node matched, per pod parsed, and how many nodes matched.
// One thread, Go's own benchmark loop (testing.Benchmark): what the selector's size costs the
// scheduler's CPU, apart from how many nodes it has to filter.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

type input struct {
	Nodes      []v1.Node              `json:"nodes"`
	Affinities map[string]v1.Affinity `json:"affinities"`
}

type result struct {
	NsPerNode float64 `json:"nsPerNode"`
	NsPerPod  float64 `json:"nsPerPod"`
	Matched   int     `json:"matched"`
	Nodes     int     `json:"nodes"`
}

func nsPerOp(run testing.BenchmarkResult) float64 {
	return float64(run.T.Nanoseconds()) / float64(run.N)
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "affinitymatch: reading the input:", err)
		os.Exit(2)
	}
	if len(in.Nodes) == 0 || len(in.Affinities) == 0 {
		fmt.Fprintln(os.Stderr, "affinitymatch: the input needs nodes and affinities")
		os.Exit(2)
	}
	out := map[string]result{}
	for name, affinity := range in.Affinities {
		pod := &v1.Pod{Spec: v1.PodSpec{Affinity: &affinity}}
		required := nodeaffinity.GetRequiredNodeAffinity(pod)
		matched := 0
		for i := range in.Nodes {
			ok, err := required.Match(&in.Nodes[i])
			if err != nil {
				fmt.Fprintf(os.Stderr, "affinitymatch: %s: %v\n", name, err)
				os.Exit(2)
			}
			if ok {
				matched++
			}
		}
		match := testing.Benchmark(func(b *testing.B) {
			for n := 0; n < b.N; n++ {
				for i := range in.Nodes {
					_, _ = required.Match(&in.Nodes[i])
				}
			}
		})
		parse := testing.Benchmark(func(b *testing.B) {
			for n := 0; n < b.N; n++ {
				_ = nodeaffinity.GetRequiredNodeAffinity(pod)
			}
		})
		out[name] = result{
			NsPerNode: nsPerOp(match) / float64(len(in.Nodes)),
			NsPerPod:  nsPerOp(parse),
			Matched:   matched,
			Nodes:     len(in.Nodes),
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "affinitymatch:", err)
		os.Exit(1)
	}
}
