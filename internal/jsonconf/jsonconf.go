// Package jsonconf reads and writes the policy packages' Configs as JSON,
// for their MarshalJSON and UnmarshalJSON methods. A field's key is its
// json tag; a field without one, or tagged "-", is not data and is left
// out. Durations are Go duration strings ("1.5s"), policy.Priority map
// keys are names ("critical"), and zero fields are left out, so that they
// read back as the defaults they mean.
//
// Reading is strict: an unknown or repeated key, a value of the wrong
// type, or a number out of the field's range fails with an [*Error] that
// names the value's JSON path. Keys match exactly.
package jsonconf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/watertight/watertight/internal/fielderr"
	"github.com/watertight/watertight/policy"
)

// Error is a JSON document that does not describe a valid Config, at
// Path: "bulkhead.limit", "route.endpoints[1].weight", or empty for the
// document as a whole. Its text reads "path: msg".
type Error struct {
	Path string
	Msg  string
}

// Error returns "path: msg", or msg for an empty Path.
func (e *Error) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	priorityType = reflect.TypeFor[policy.Priority]()
)

// Marshal returns the JSON object of the struct v's data fields, zero
// fields left out. A field that is a json.Marshaler writes itself.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := encodeStruct(&b, reflect.ValueOf(v), ""); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Read reads the JSON object data into *dst, then checks the result with
// check (nil checks nothing). A key data leaves out leaves its field as
// it was, as encoding/json does; a map or list read replaces the old.
// null leaves *dst unchanged. On error *dst is unchanged, and the error
// is an [*Error]: check's *fielderr.Error is named by its JSON path.
func Read[T any](data []byte, dst *T, check func(T) error) error {
	if string(bytes.TrimSpace(data)) == "null" {
		return nil
	}
	c := *dst
	if err := decodeStruct(data, reflect.ValueOf(&c).Elem(), ""); err != nil {
		return err
	}
	if check != nil {
		if err := check(c); err != nil {
			return fromField(reflect.TypeFor[T](), err)
		}
	}
	*dst = c
	return nil
}

// Prefix returns err with path before its own: an *Error's path is
// extended, any other error gets path.
func Prefix(path string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		if e.Path == "" {
			return &Error{Path: path, Msg: e.Msg}
		}
		if strings.HasPrefix(e.Path, "[") {
			return &Error{Path: path + e.Path, Msg: e.Msg}
		}
		return &Error{Path: path + "." + e.Path, Msg: e.Msg}
	}
	return &Error{Path: path, Msg: err.Error()}
}

// field is a struct field that is data: its JSON key and index.
type field struct {
	key   string
	index int
}

// fields returns t's data fields in order.
func fields(t reflect.Type) []field {
	var fs []field
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.IsExported() && key != "" && key != "-" {
			fs = append(fs, field{key, i})
		}
	}
	return fs
}

// child returns the path of key in the object at path.
func child(path, key string) string {
	plain := key != "" && strings.Trim(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == ""
	switch {
	case !plain:
		return path + "[" + strconv.Quote(key) + "]"
	case path == "":
		return key
	}
	return path + "." + key
}

func encodeStruct(b *bytes.Buffer, v reflect.Value, path string) error {
	b.WriteByte('{')
	n := 0
	for _, f := range fields(v.Type()) {
		fv := v.Field(f.index)
		if fv.IsZero() {
			continue
		}
		if n++; n > 1 {
			b.WriteByte(',')
		}
		writeString(b, f.key)
		b.WriteByte(':')
		if err := encodeValue(b, fv, child(path, f.key)); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

func encodeValue(b *bytes.Buffer, v reflect.Value, path string) error {
	if v.Type() == durationType {
		writeString(b, time.Duration(v.Int()).String())
		return nil
	}
	if m, ok := v.Interface().(json.Marshaler); ok {
		out, err := m.MarshalJSON()
		if err != nil {
			return Prefix(path, err)
		}
		b.Write(out)
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		writeString(b, v.String())
	case reflect.Bool:
		b.WriteString(strconv.FormatBool(v.Bool()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return &Error{Path: path, Msg: fmt.Sprintf("%v has no JSON number", f)}
		}
		b.WriteString(strconv.FormatFloat(f, 'g', -1, v.Type().Bits()))
	case reflect.Pointer:
		return encodeValue(b, v.Elem(), path)
	case reflect.Struct:
		return encodeStruct(b, v, path)
	case reflect.Slice:
		b.WriteByte('[')
		for i := range v.Len() {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := encodeValue(b, v.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case reflect.Map:
		return encodeMap(b, v, path)
	default:
		return &Error{Path: path, Msg: "unsupported type " + v.Type().String()}
	}
	return nil
}

// encodeMap writes map v as an object, its keys in order.
func encodeMap(b *bytes.Buffer, v reflect.Value, path string) error {
	keys := v.MapKeys()
	slices.SortFunc(keys, func(x, y reflect.Value) int { return strings.Compare(mapKey(x), mapKey(y)) })
	b.WriteByte('{')
	for i, k := range keys {
		key := mapKey(k)
		if k.Type() == priorityType {
			if _, err := policy.ParsePriority(key); err != nil {
				return &Error{Path: path, Msg: "unknown priority " + key}
			}
		}
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(b, key)
		b.WriteByte(':')
		if err := encodeValue(b, v.MapIndex(k), child(path, key)); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

// mapKey returns a map key as a JSON key: a policy.Priority by name.
func mapKey(k reflect.Value) string {
	if k.Type() == priorityType {
		return policy.Priority(k.Int()).String()
	}
	return k.String()
}

func writeString(b *bytes.Buffer, s string) {
	out, _ := json.Marshal(s) // a string always encodes
	b.Write(out)
}

// want returns the error of a value raw at path that is not what.
func want(path, what string, raw []byte) error {
	got := string(raw)
	if len(got) > 40 {
		got = got[:40] + "..."
	}
	if got == "" {
		got = "nothing"
	}
	return &Error{Path: path, Msg: "want " + what + ", got " + got}
}

// members calls fn for each key and raw value of the JSON object raw at
// path, in order, after checking that no key repeats.
func members(raw []byte, path string, fn func(key string, val json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return want(path, "an object", raw)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return syntax(path, err)
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return syntax(child(path, key), err)
		}
		if seen[key] {
			return &Error{Path: child(path, key), Msg: "repeated field"}
		}
		seen[key] = true
		if err := fn(key, val); err != nil {
			return err
		}
	}
	return end(dec, path)
}

// end reads the closing delimiter of the value at path, and checks that
// nothing follows it.
func end(dec *json.Decoder, path string) error {
	if _, err := dec.Token(); err != nil {
		return syntax(path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &Error{Path: path, Msg: "data after the value"}
	}
	return nil
}

// syntax returns the error of the JSON decoder at path.
func syntax(path string, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return &Error{Path: path, Msg: "unexpected end of JSON input"}
	}
	return &Error{Path: path, Msg: err.Error()}
}

func decodeStruct(raw []byte, v reflect.Value, path string) error {
	fs := fields(v.Type())
	return members(raw, path, func(key string, val json.RawMessage) error {
		i := slices.IndexFunc(fs, func(f field) bool { return f.key == key })
		if i < 0 {
			return &Error{Path: child(path, key), Msg: "unknown field"}
		}
		return decodeValue(val, v.Field(fs[i].index), child(path, key))
	})
}

// decodeValue sets v, addressable, to the JSON value raw at path.
func decodeValue(raw []byte, v reflect.Value, path string) error {
	t := v.Type()
	switch k := t.Kind(); {
	case string(raw) == "null" && (k == reflect.Pointer || k == reflect.Map || k == reflect.Slice):
		v.SetZero()
		return nil
	case k == reflect.Pointer:
		// A new value, so that what v pointed to stays as it was.
		p := reflect.New(t.Elem())
		if !v.IsNil() {
			p.Elem().Set(v.Elem())
		}
		if err := decodeValue(raw, p.Elem(), path); err != nil {
			return err
		}
		v.Set(p)
		return nil
	}
	if u, ok := v.Addr().Interface().(json.Unmarshaler); ok {
		if err := u.UnmarshalJSON(raw); err != nil {
			return Prefix(path, err)
		}
		return nil
	}
	if t == durationType {
		return decodeDuration(raw, v, path)
	}
	switch t.Kind() {
	case reflect.String:
		s, ok := str(raw)
		if !ok {
			return want(path, "a string", raw)
		}
		v.SetString(s)
	case reflect.Bool:
		switch string(raw) {
		case "true", "false":
			v.SetBool(string(raw) == "true")
		default:
			return want(path, "true or false", raw)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return decodeNumber(raw, v, path)
	case reflect.Struct:
		return decodeStruct(raw, v, path)
	case reflect.Slice:
		return decodeSlice(raw, v, path)
	case reflect.Map:
		return decodeMap(raw, v, path)
	default:
		return &Error{Path: path, Msg: "unsupported type " + t.String()}
	}
	return nil
}

// str returns the JSON string raw, and whether it is one.
func str(raw []byte) (string, bool) {
	var s string
	return s, len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil
}

func decodeDuration(raw []byte, v reflect.Value, path string) error {
	s, ok := str(raw)
	if !ok {
		return want(path, `a duration string such as "1.5s"`, raw)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return want(path, `a duration such as "1.5s"`, raw)
	}
	v.SetInt(int64(d))
	return nil
}

// decodeNumber sets the number v to raw, which must be a JSON number in
// v's range.
func decodeNumber(raw []byte, v reflect.Value, path string) error {
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return want(path, "a number", raw)
	}
	s, bits := string(raw), v.Type().Bits()
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(s, bits)
		if err != nil {
			return want(path, fmt.Sprintf("a number within float%d's range", bits), raw)
		}
		v.SetFloat(f)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u, err := strconv.ParseUint(s, 10, bits)
		if err != nil {
			return want(path, fmt.Sprintf("an integer from 0 to %d", uint64(1)<<bits-1), raw)
		}
		v.SetUint(u)
	default:
		i, err := strconv.ParseInt(s, 10, bits)
		if err != nil {
			return want(path, fmt.Sprintf("an integer from %d to %d", int64(-1)<<(bits-1), int64(1)<<(bits-1)-1), raw)
		}
		v.SetInt(i)
	}
	return nil
}

func decodeSlice(raw []byte, v reflect.Value, path string) error {
	var items []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return want(path, "an array", raw)
	}
	s := reflect.MakeSlice(v.Type(), len(items), len(items))
	for i, item := range items {
		if err := decodeValue(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	v.Set(s)
	return nil
}

// decodeMap sets v to a new map of raw's members. Its keys are strings,
// or policy.Priority names.
func decodeMap(raw []byte, v reflect.Value, path string) error {
	t := v.Type()
	m := reflect.MakeMap(t)
	err := members(raw, path, func(key string, val json.RawMessage) error {
		k := reflect.New(t.Key()).Elem()
		switch {
		case t.Key() == priorityType:
			p, err := policy.ParsePriority(key)
			if err != nil {
				return &Error{Path: child(path, key), Msg: "unknown priority: want sheddable, default or critical"}
			}
			k.SetInt(int64(p))
		case t.Key().Kind() == reflect.String:
			k.SetString(key)
		default:
			return &Error{Path: path, Msg: "unsupported type " + t.String()}
		}
		e := reflect.New(t.Elem()).Elem()
		if err := decodeValue(val, e, child(path, key)); err != nil {
			return err
		}
		m.SetMapIndex(k, e)
		return nil
	})
	if err != nil {
		return err
	}
	v.Set(m)
	return nil
}

// fromField returns err as an *Error: a *fielderr.Error's Go path from a
// value of type t becomes its JSON path.
func fromField(t reflect.Type, err error) error {
	var je *Error
	if errors.As(err, &je) {
		return je
	}
	var fe *fielderr.Error
	if !errors.As(err, &fe) {
		return &Error{Msg: err.Error()}
	}
	return &Error{Path: jsonPath(t, fe.Field), Msg: fe.Msg}
}

// jsonPath returns the JSON path of the Go path goPath ("Endpoints[2].Name")
// from a value of type t, or goPath itself if t has no such field.
func jsonPath(t reflect.Type, goPath string) string {
	path, rest := "", goPath
	for rest != "" {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if strings.HasPrefix(rest, "[") {
			idx, after, ok := strings.Cut(rest[1:], "]")
			switch {
			case !ok:
				return goPath
			case t.Kind() == reflect.Slice:
				path += "[" + idx + "]"
			case t.Kind() == reflect.Map:
				path = child(path, idx)
			default:
				return goPath
			}
			t, rest = t.Elem(), strings.TrimPrefix(after, ".")
			continue
		}
		n := strings.IndexAny(rest, ".[")
		if n < 0 {
			n = len(rest)
		}
		if t.Kind() != reflect.Struct {
			return goPath
		}
		f, ok := t.FieldByName(rest[:n])
		key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !ok || key == "" || key == "-" {
			return goPath
		}
		path, t, rest = child(path, key), f.Type, strings.TrimPrefix(rest[n:], ".")
	}
	return path
}
