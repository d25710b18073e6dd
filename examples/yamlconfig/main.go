// Command yamlconfig builds a watertight pipeline from a YAML file, and
// prints the Config it read as JSON:
//
//	go run . testdata/pipeline.yaml
//
// sigs.k8s.io/yaml turns the YAML into JSON and hands it to
// encoding/json, so the keys, the duration strings and the errors are
// those of watertight.Config's JSON: an invalid value fails with its
// path, "bulkhead.limit: must be >= 1, got 0". YAML stays out of the
// library's dependencies: this is a module of its own.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/watertight/watertight"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: yamlconfig FILE.yaml")
		os.Exit(2)
	}
	cfg, err := load(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	p, err := watertight.New("yamlconfig", cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer p.Close()
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}

// load reads the YAML file path as a watertight.Config. yaml.UnmarshalStrict
// also refuses a key repeated in the YAML, which the conversion to JSON
// would otherwise drop.
func load(path string) (watertight.Config, error) {
	var cfg watertight.Config
	data, err := os.ReadFile(path)
	if err != nil {
		return cfg, err
	}
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}
