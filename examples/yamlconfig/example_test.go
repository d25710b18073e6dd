package main

import (
	"context"
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/policy"
)

// A pipeline built from a YAML file, whose keys and durations are those
// of watertight.Config's JSON; and an invalid value, named by its path.
func Example() {
	cfg, err := load("testdata/pipeline.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := watertight.New("llm", cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	answer, err := policy.Do(context.Background(), p, func(ctx context.Context) (string, error) {
		return "hello", nil
	})
	fmt.Println(answer, err)
	fmt.Println(cfg.Bulkhead.MaxWait, cfg.Bulkhead.Reserve[policy.PriorityCritical], cfg.Breaker.Window)

	// Written back, the keys come sorted.
	out, err := yaml.Marshal(cfg.Bulkhead)
	fmt.Print(string(out), err, "\n")

	err = yaml.Unmarshal([]byte("bulkhead:\n  limit: 0\n"), &cfg)
	fmt.Println(err)
	// Output:
	// hello <nil>
	// 1s 2 1m0s
	// limit: 10
	// max_queue: 20
	// max_wait: 1s
	// reserve:
	//   critical: 2
	// <nil>
	// error unmarshaling JSON: while decoding JSON: bulkhead.limit: must be >= 1, got 0
}
