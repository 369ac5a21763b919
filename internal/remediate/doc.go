// Package remediate repairs what an open window admitted, from its audit
// (internal/audit): it re-applies the recovered mutating webhook's patch to
// each object it would mutate, evicts the controller-owned Pods it would
// mutate so that their owners recreate them through the webhook, and labels
// the objects a validating webhook now objects to. It never deletes.
//
// The safety rules, each tested:
//   - only objects the audit re-reviewed in this window are acted on: a
//     NotChecked or NotReviewed finding (the webhook failed the re-review, or
//     declares side effects) is reported and left alone;
//   - a patch is the review's JSON patch, plus the object's
//     resourceVersion from the review as its precondition and the record
//     of the repair, nothing else: an object changed since is re-reviewed,
//     never overwritten;
//   - every change is first sent as a server-side dry run, all of them
//     before the first real one, so immutable fields, other admission and
//     quota answer before anything changes;
//   - an eviction goes through the Eviction API, so PodDisruptionBudgets
//     hold (a 429 waits with bounded backoff); at most N Pods at a time, and
//     never two of one owner's at once; a bare Pod is reported, never
//     deleted;
//   - an object is repaired at most once per window: the patch ends with the
//     annotation tripswitch.dev/remediated (RepairedKey), in the same
//     request, and a later run leaves an object that carries this window's
//     repair alone, even when the webhook, not being idempotent, answers it
//     with a new patch; a patch that leaves the object as stored is no
//     repair, counted and recorded as none;
//   - the first authorization error stops the run, naming the permission;
//   - an update the recovered webhook itself denies (it reviews UPDATE too)
//     is a designed limit, not a failure: no update of that object can
//     pass, so it is Marked where the webhook cannot block it (an event on
//     it, the window's audit record, the report);
//   - each change is one request, so a run stopped at any point (the
//     controller gone, the breaker deleted) leaves every object either
//     repaired or untouched, and a second run finds only what is left.
package remediate
