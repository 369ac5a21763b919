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
//   - a patch is the review's JSON patch and nothing else, plus the
//     object's resourceVersion from the review as its precondition: an
//     object changed since is re-reviewed, never overwritten;
//   - every change is first sent as a server-side dry run, all of them
//     before the first real one, so immutable fields, other admission and
//     quota answer before anything changes;
//   - an eviction goes through the Eviction API, so PodDisruptionBudgets
//     hold (a 429 waits with bounded backoff); at most N Pods at a time, and
//     never two of one owner's at once; a bare Pod is reported, never
//     deleted;
//   - the first authorization error stops the run, naming the permission;
//   - each change is one request, so a run stopped at any point (the
//     controller gone, the breaker deleted) leaves every object either
//     repaired or untouched, and a second run finds only what is left.
package remediate
