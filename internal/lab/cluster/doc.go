// Package cluster holds the lab's stand-ins for a cluster's machinery: the
// control plane (kube-apiserver + etcd from internal/controlplane and a real
// kube-controller-manager), the network of node, load-balancer and client
// namespaces with the real kube-proxy on every node (built on netlab), the
// node agent (a kubelet and scheduler stand-in: Nodes, Leases, binding, pod
// runtimes with probes, hooks, sidecars and container processes) and the API
// server's egress proxy to Service-referenced webhooks.
package cluster
