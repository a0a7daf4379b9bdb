// Package install holds the tests of zerodrop's install artifacts: the Helm
// chart charts/zerodrop and deploy/, which hack/render-deploy.sh renders
// from it. They run the real helm CLI (controlplane.Helm) and a real
// kube-apiserver (controlplane): the chart lints, deploy/ is exactly its render,
// bad values fail with a clear message, the rendered objects pass the API
// server's validation (server-side dry run), and the properties the
// controller depends on hold (the drain address, least-privilege RBAC, the
// security context). The package has no code of its own.
package install
