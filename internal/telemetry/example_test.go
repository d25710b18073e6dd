package telemetry_test

import (
	"context"
	"fmt"

	"github.com/watertight/watertight/internal/telemetry"
)

func ExampleErrorType() {
	fmt.Println(telemetry.ErrorType(context.DeadlineExceeded))
	fmt.Println(telemetry.ErrorType(context.Canceled))
	// Output:
	// timeout
	// canceled
}
