// Package adversary searches for the next write loop: a seeded, randomized
// test (pgregory.net/rapid's state machines) that runs the controller binary
// as two replicas on a real kube-apiserver and drives it through generated
// sequences of external writes of every shape (an owner's whole Update from
// a template, server-side apply with and without force, client-side apply,
// a JSON merge patch of the webhooks list, delete and recreate, a caBundle
// injector, an administrator's edit, a no-op Update), webhook faults (a
// delay, HTTP 500, connections reset, reviews failing while the health
// endpoint passes) and recoveries, SIGKILLs and restarts of either replica,
// and edits of the breaker (mode, openAction, halfOpen, the API server
// signal, deletion).
//
// Every write to the configuration is recorded: the controller's through a
// proxy in front of the API server, everyone else's through a watch. After
// every step the history is checked against the promises of docs/safety.md:
// writes per outage within the budget (one open, one close or drop, two per
// half-open trial), and never an open after someone undid one in the same
// outage, nor a write over an administrator's value. Each recovery waits
// for the breaker to settle and checks that the configuration is what its
// last writer other than tripswitch wanted, with no trace of tripswitch
// left, that the breaker said who undid its open, and that it raised no
// storm of warnings. A failure prints the seed and the shortest sequence
// rapid shrank it to.
package adversary
