package conformance

import (
	"encoding/json"
	"reflect"
	"sort"
	"time"
)

var (
	timeType = reflect.TypeOf(time.Time{})
	rawType  = reflect.TypeOf(json.RawMessage(nil))
	errType  = reflect.TypeOf((*error)(nil)).Elem()
)

// normalize turns a result into plain maps, slices and scalars for
// comparison: times become epoch milliseconds (0 for the zero time), JSON
// payloads their exact text, structs maps by field name (embedded structs
// flattened), nil and empty slices alike null.
func normalize(v any) any {
	if v == nil {
		return nil
	}
	return walk(reflect.ValueOf(v))
}

func walk(v reflect.Value) any {
	if !v.IsValid() {
		return nil
	}
	if v.Type() == timeType {
		t := v.Interface().(time.Time)
		if t.IsZero() {
			return int64(0)
		}
		return t.UnixMilli()
	}
	if v.Type().Implements(errType) && v.Kind() != reflect.Struct {
		if v.IsNil() {
			return nil
		}
		return v.Interface().(error).Error()
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return walk(v.Elem())
	case reflect.Struct:
		out := map[string]any{}
		flatten(v, out)
		return out
	case reflect.Slice:
		if v.Type() == rawType || v.Type().Elem().Kind() == reflect.Uint8 {
			if v.Len() == 0 {
				return nil
			}
			return string(v.Bytes())
		}
		if v.Len() == 0 {
			return nil
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = walk(v.Index(i))
		}
		return out
	case reflect.Array:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = walk(v.Index(i))
		}
		return out
	case reflect.Map:
		if v.Len() == 0 {
			return nil
		}
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return render(walk(keys[i])) < render(walk(keys[j])) })
		out := make([][2]any, len(keys))
		for i, k := range keys {
			out[i] = [2]any{walk(k), walk(v.MapIndex(k))}
		}
		return out
	}
	return v.Interface()
}

func flatten(v reflect.Value, out map[string]any) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Anonymous && f.Type.Kind() == reflect.Struct && f.Type != timeType {
			flatten(v.Field(i), out)
			continue
		}
		out[f.Name] = walk(v.Field(i))
	}
}
