#!/usr/bin/env bash
# make cluster-sample: the sample webhook of config/samples/cluster in the
# running cluster, as a user would deploy it by hand, with the pinned
# kubectl: its certificate (made here, bin/cluster serving-cert), the Secret,
# config/samples/cluster/sample-hook.yaml (Deployment, Service, PDB,
# MutatingWebhookConfiguration), the caBundle, then the breaker
# (breaker.yaml) once both replicas serve. The image is make cluster-images'.
# make cluster-sample-down (DOWN=1) deletes it all.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../versions/versions.env
. hack/versions/versions.env
KUBECACHEDIR=$(bin/cluster kubecachedir)
export KUBECACHEDIR
kubectl="bin/k8s/$KUBE_VERSION/kubectl --kubeconfig $(bin/cluster kubeconfig)"
if [ -n "${DOWN:-}" ]; then
	$kubectl delete --ignore-not-found --wait -f config/samples/cluster/breaker.yaml
	$kubectl delete --ignore-not-found --wait -f config/samples/cluster/sample-hook.yaml
	exit 0
fi
bin/cluster running >/dev/null || { echo "no cluster is running: make cluster" >&2; exit 1; }
certs=out/cluster-sample
bin/cluster serving-cert sample-hook sample-hook "$certs"
$kubectl create namespace sample-hook --dry-run=client -o yaml | $kubectl apply -f -
$kubectl -n sample-hook create secret tls sample-hook-tls --cert "$certs/tls.crt" --key "$certs/tls.key" --dry-run=client -o yaml | $kubectl apply -f -
$kubectl apply -f config/samples/cluster/sample-hook.yaml
$kubectl patch mutatingwebhookconfiguration sample-hook --type=json \
	-p "[{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"$(base64 -w0 "$certs/ca.crt")\"}]"
$kubectl -n sample-hook rollout status deployment/sample-hook --timeout 3m
$kubectl apply -f config/samples/cluster/breaker.yaml
$kubectl wait --for=jsonpath='{.status.state}'=Closed webhookcircuitbreaker/sample-hook --timeout 2m
