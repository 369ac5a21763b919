// Package circuit opens and closes one webhook's circuit on a webhook
// configuration with a single conditional JSON Patch per step.
//
// The recovery record lives on the webhook configuration itself, as an
// annotation keyed by webhook name. Opening changes the webhook and writes the
// record in one request; closing restores exactly what the record says and
// deletes it in one request. There is no second store that can disagree.
//
// Every patch carries the resourceVersion that was read (the API server
// answers 409 Conflict when it is stale) and a test on the webhook's name at
// the index being changed (422 Invalid when the list moved). Both mean "re-read
// and decide again": see IsStale. Only the one webhook entry and the one
// annotation change; caBundle and every other webhook are left byte-identical.
package circuit
