package main

import (
	"strings"
	"testing"
)

func TestParsePlatforms(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "linux/amd64,linux/arm64", want: "linux/amd64,linux/arm64"},
		{in: "linux/arm64, linux/amd64", want: "linux/amd64,linux/arm64"},
		{in: "linux/amd64", want: "linux/amd64"},
		{in: "linux/amd64,linux/amd64", want: "linux/amd64"},
		{in: "linux/s390x", err: `"linux/s390x" is not one of linux/amd64,linux/arm64`},
		{in: " , ", err: "name at least one"},
	} {
		got, err := parsePlatforms(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parsePlatforms(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || platformList(got) != tc.want):
			t.Errorf("parsePlatforms(%q) = %s, %v; want %s", tc.in, platformList(got), err, tc.want)
		}
	}
}
