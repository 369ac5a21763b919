package jsonpatch

import (
	"encoding/json"
	"testing"
)

func TestOpKeepsValueButOnRemove(t *testing.T) {
	for _, tc := range []struct {
		op   Op
		want string
	}{
		{Op{Op: "test", Path: "/a", Value: ""}, `{"op":"test","path":"/a","value":""}`},
		{Op{Op: "add", Path: "/a", Value: nil}, `{"op":"add","path":"/a","value":null}`},
		{Op{Op: "remove", Path: "/a", Value: "ignored"}, `{"op":"remove","path":"/a"}`},
	} {
		got, err := json.Marshal(tc.op)
		if err != nil || string(got) != tc.want {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", tc.op, got, err, tc.want)
		}
	}
	if got := Pointer("tripswitch.dev/circuit.a~b"); got != "tripswitch.dev~1circuit.a~0b" {
		t.Errorf("Pointer = %s", got)
	}
}
