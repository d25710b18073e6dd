package nilcheck

import "reflect"

// Pointer reports whether v holds a nil pointer, such as a
// (*sdkmetric.MeterProvider)(nil) or a (*redis.Client)(nil) in a Config:
// v != nil, yet any method call on it would panic. A constructor treats it
// as unset (or refuses it, naming the field) rather than leave it to panic
// in the first call. A nil interface is not a nil pointer: test v == nil
// beside it. It is safe for concurrent use.
func Pointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
