package breaker

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// settingKinds maps each Settings key to what its value must be, read once
// from the struct's tags so that a new setting needs no second list.
var settingKinds = func() map[string]string {
	kinds := map[string]string{}
	t := reflect.TypeFor[Settings]()
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		kinds[key] = kindOf(key, f.Type.Elem())
	}
	return kinds
}()

// kindOf names the JSON value a setting takes, as an error message says it.
func kindOf(key string, t reflect.Type) string {
	switch t.Kind() {
	case reflect.Float64:
		return "a number"
	case reflect.Int:
		return "an integer"
	case reflect.Bool:
		return "true or false"
	}
	if strings.Contains(key, "Duration") {
		return `a duration string with its unit, like "15s" or "500ms" (a bare number is refused: it could mean seconds or milliseconds)`
	}
	return "a string"
}

var fileKeys = map[string]string{"enabled": "true or false", "defaults": "an object", "circuits": "an object"}

// checkKeys finds, before decoding, every key of a File that is not one
// and every value of the wrong kind, naming each by its path
// (circuits.mail.slidingWindowSize) and suggesting the nearest known key
// for a typo. Syntax errors are left to the decoder.
func checkKeys(data []byte) error {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return nil
	}
	var errs []error
	for _, k := range sortedKeys(top) {
		v := top[k]
		want, ok := fileKeys[k]
		switch {
		case !ok:
			errs = append(errs, unknownKey(k, k, v, fileKeys))
		case !isKind(v, want):
			errs = append(errs, &ConfigError{Field: k, Value: shown(v), Reason: "must be " + want})
		case k == "defaults":
			errs = append(errs, checkSettings("defaults.", v)...)
		case k == "circuits":
			var circuits map[string]json.RawMessage
			_ = json.Unmarshal(v, &circuits)
			for _, name := range sortedKeys(circuits) {
				if s := circuits[name]; !isKind(s, "an object") {
					errs = append(errs, &ConfigError{Field: "circuits." + name, Value: shown(s), Reason: "must be an object of settings"})
				} else {
					errs = append(errs, checkSettings("circuits."+name+".", s)...)
				}
			}
		}
	}
	return errors.Join(errs...)
}

func checkSettings(prefix string, raw json.RawMessage) []error {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	var errs []error
	for _, k := range sortedKeys(m) {
		v := m[k]
		want, ok := settingKinds[k]
		switch {
		case !ok:
			errs = append(errs, unknownKey(prefix+k, k, v, settingKinds))
		case !isKind(v, want):
			errs = append(errs, &ConfigError{Field: prefix + k, Value: shown(v), Reason: "must be " + want})
		}
	}
	return errs
}

// isKind reports whether a raw JSON value is of the kind a key takes; null
// means "unset" and is of every kind.
func isKind(v json.RawMessage, want string) bool {
	var x any
	if json.Unmarshal(v, &x) != nil {
		return true // the decoder reports it
	}
	switch x := x.(type) {
	case nil:
		return true
	case bool:
		return want == "true or false"
	case string:
		return strings.HasPrefix(want, "a string") || strings.HasPrefix(want, "a duration")
	case float64:
		return want == "a number" || (want == "an integer" && x == float64(int64(x)))
	case map[string]any:
		return want == "an object"
	}
	return false
}

// unknownKey is the error for a key that is not one of known.
func unknownKey(path, key string, v json.RawMessage, known map[string]string) error {
	reason := "unknown key"
	if s := nearest(key, sortedKeys(known)); s != "" {
		reason += fmt.Sprintf("; did you mean %q?", s)
	}
	return &ConfigError{Field: path, Value: shown(v), Reason: reason}
}

// shown is a raw value as an error shows it: short ones whole.
func shown(v json.RawMessage) string {
	if s := string(v); len(s) <= 40 {
		return s
	}
	return string(v[:37]) + "..."
}

// nearest returns the candidate closest to s in edit distance (case
// ignored), if it is close enough to be a typo of it, or else the shortest
// that s begins, or else "". Candidates
// come sorted, so ties go the same way every time.
func nearest(s string, candidates []string) string {
	best, bestD := "", len(s)/3+2
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" && len(s) >= 4 {
		// A shortened key (failureRate for failureRateThreshold).
		for _, c := range candidates {
			if strings.HasPrefix(strings.ToLower(c), strings.ToLower(s)) && (best == "" || len(c) < len(best)) {
				best = c
			}
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
