package watertight_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/policy"
)

// A pipeline from a JSON file: the quick start's Config, as data. A value
// New would refuse fails while reading, named by its JSON path.
func ExampleConfig_UnmarshalJSON() {
	data, err := os.ReadFile("testdata/quickstart.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	var cfg watertight.Config
	if err := json.Unmarshal(data, &cfg); err != nil {
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
	out, _ := json.Marshal(cfg)
	fmt.Println(string(out))

	err = json.Unmarshal([]byte(`{"bulkhead": {"limit": 0}}`), &cfg)
	fmt.Println(err)
	// Output:
	// hello <nil>
	// {"bulkhead":{"limit":10,"max_queue":20,"max_wait":"1s"},"deadline":{"timeout":"30s"},"retry":{"max_attempts":3},"breaker":{},"attempt":{"timeout":"10s"}}
	// bulkhead.limit: must be >= 1, got 0
}
