package controller

// The permissions the controller needs that do not depend on the deployment.
// controller-gen turns these markers into config/rbac/role.yaml (make
// generate); the table in docs/rbac.md says why each verb is there.
//
// WebhookCircuitBreakers are cluster-scoped: read and watch them, update
// them to add and remove the finalizer, write their status.
//
// +kubebuilder:rbac:groups=tripswitch.dev,resources=webhookcircuitbreakers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=tripswitch.dev,resources=webhookcircuitbreakers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=tripswitch.dev,resources=webhookcircuitbreakers/finalizers,verbs=update
//
// The metrics endpoint authenticates and authorizes each scrape through the
// API server (controller-runtime's metrics filters).
//
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
//
// Not generated, because they depend on the deployment (config/rbac and the
// Helm chart write them): get and patch on the approved webhook
// configurations only, by resourceNames; the Lease in the controller's own
// namespace; events in "default", where Kubernetes keeps the events of
// cluster-scoped objects; get on Services and list on EndpointSlices only
// when endpoint probing is enabled.
