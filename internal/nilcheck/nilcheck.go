package nilcheck

import "reflect"

// Pointer reports whether v holds a nil pointer, such as a
// (*sdkmetric.MeterProvider)(nil) in a Config: v != nil, yet any method
// call on it would panic. A nil interface is not a nil pointer: test
// v == nil beside it. It is safe for concurrent use.
func Pointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
