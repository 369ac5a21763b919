// Package owners reads who else writes a webhook configuration, from its
// managedFields and owner references, and what that means for a breaker on
// one of its webhooks.
//
// A writer is any field manager but tripswitch's own (circuit.FieldManager)
// that owns a field of the breaker's webhook entry. One that owns only the
// caBundle (cert-manager's cainjector, Gatekeeper's cert-controller, a
// caBundle rotator) never undoes an open. A person's tool (kubectl, Helm)
// writes only when someone runs it, so it is no owner either. A controller
// known by name (Kyverno, istiod, Flux) is an owner, with what it is known to
// put back and its own fail-open setting. Any other writer that uses
// server-side apply is a controller (a person's kubectl applies as
// "kubectl"); one that uses Update is when the configuration has an owner
// reference or the writer came back after creating it (its last write is
// later than the configuration's creation). What an unknown controller puts
// back is read from how it writes: server-side apply takes back the fields
// it applies, so the failurePolicy, never tripswitch's matchCondition
// (matchConditions is a list keyed by name); Update may write the whole
// entry, the matchCondition included. Judge says it in one verdict;
// Reverter names the writer that undid an open, from the same fields.
package owners
