// Package policy is the controller's decision, and the status it implies,
// as pure functions: what was observed (the webhook, its record, the
// health the probes and the API server gathered, the spec) goes in; one
// write, its reason and the next status come out. Nothing here reads a
// clock or calls a client, so a table test covers every case.
package policy
