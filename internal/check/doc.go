// Package check checks every WebhookCircuitBreaker for what would keep
// it from working, before an outage finds out: `tripswitch check`, in the
// spirit of `cmctl check`. It runs with an operator's credentials (list
// breakers and webhook configurations, create SubjectAccessReviews) and
// judges the controller's permissions by asking the API server about the
// controller's ServiceAccount, so it also tells a configuration that does
// not exist from one that is not approved, which the controller itself
// cannot.
package check
