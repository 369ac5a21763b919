// Package jsonpatch spells the RFC 6902 operations tripswitch's writes are
// made of, so every patch it sends marshals the same way.
package jsonpatch

import (
	"encoding/json"
	"strings"
)

// Op is one RFC 6902 operation.
type Op struct {
	Op    string
	Path  string
	Value any
}

// MarshalJSON keeps "value" on every operation but remove, even when it is
// empty, so a test against "" is not silently turned into a malformed op.
func (o Op) MarshalJSON() ([]byte, error) {
	if o.Op == "remove" {
		return json.Marshal(struct {
			Op   string `json:"op"`
			Path string `json:"path"`
		}{o.Op, o.Path})
	}
	return json.Marshal(struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}{o.Op, o.Path, o.Value})
}

// Pointer escapes a JSON Pointer reference token (RFC 6901): "~" and "/".
func Pointer(token string) string {
	return strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
}
