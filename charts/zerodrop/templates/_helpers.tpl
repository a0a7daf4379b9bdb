{{/*
Name of every object. Fixed rather than derived from the release name: the
webhook configuration and ClusterRoles are cluster-scoped, the drain address
is fixed, and existing pods' hooks outlive a reinstall.
*/}}
{{- define "zerodrop.fullname" -}}
{{- .Values.fullnameOverride | default .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/*
Selector labels. Only the name: a Deployment's selector cannot change, and
installs from deploy/ select on it.
*/}}
{{- define "zerodrop.selectorLabels" -}}
app.kubernetes.io/name: {{ include "zerodrop.fullname" . }}
{{- end -}}

{{- define "zerodrop.labels" -}}
{{ include "zerodrop.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ include "zerodrop.tag" . | quote }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "zerodrop.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{- define "zerodrop.leaseName" -}}
{{- .Values.leaderElection.id | default (printf "%s-controller" (include "zerodrop.fullname" .)) -}}
{{- end -}}

{{- define "zerodrop.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "zerodrop.fullname" .) -}}
{{- end -}}

{{- define "zerodrop.webhookService" -}}
{{- printf "%s-webhook" (include "zerodrop.fullname" .) -}}
{{- end -}}

{{/* The cert-manager Certificate; its Secret is <fullname>-webhook-cert. */}}
{{- define "zerodrop.certificate" -}}
{{- printf "%s-webhook" (include "zerodrop.fullname" .) -}}
{{- end -}}

{{/* Load balancer names, a list or a comma-separated string, joined. */}}
{{- define "zerodrop.joinNames" -}}
{{- $lbs := . | default "" -}}
{{- if kindIs "slice" $lbs -}}
{{- join "," $lbs -}}
{{- else -}}
{{- $lbs | toString -}}
{{- end -}}
{{- end -}}

{{/* zerodrop's own Azure load balancers (azure.loadBalancers). */}}
{{- define "zerodrop.loadBalancers" -}}
{{- include "zerodrop.joinNames" .Values.azure.loadBalancers -}}
{{- end -}}

{{/* The load balancers gate-only Services are read from (azure.gateOnlyLoadBalancers). */}}
{{- define "zerodrop.gateOnlyLoadBalancers" -}}
{{- include "zerodrop.joinNames" .Values.azure.gateOnlyLoadBalancers -}}
{{- end -}}

{{/*
Checks the values before anything renders, so that a missing setting fails
`helm install` with its name instead of a controller in CrashLoopBackOff.
*/}}
{{- define "zerodrop.validate" -}}
{{- $provider := toString .Values.provider -}}
{{- if not (has $provider (list "azure" "haproxy" "aws")) -}}
{{- fail (printf "provider %q is not installable with this chart: provider=azure, provider=haproxy or provider=aws" $provider) -}}
{{- end -}}
{{- if and (ne $provider "azure") (include "zerodrop.gateOnlyLoadBalancers" . | trim) -}}
{{- fail (printf "azure.gateOnlyLoadBalancers is set but provider=%s: gate-only Services read Azure load balancers (provider=azure)" $provider) -}}
{{- end -}}
{{- $missing := list -}}
{{- if eq $provider "azure" -}}
{{- if not .Values.azure.subscriptionID }}{{ $missing = append $missing "azure.subscriptionID (the load balancers' subscription, a GUID)" }}{{ end -}}
{{- if not .Values.azure.resourceGroup }}{{ $missing = append $missing "azure.resourceGroup (the load balancers' resource group)" }}{{ end -}}
{{- if not (include "zerodrop.loadBalancers" . | trim) }}{{ $missing = append $missing "azure.loadBalancers (the Standard Load Balancer names)" }}{{ end -}}
{{- if not .Values.azure.subnetID }}{{ $missing = append $missing "azure.subnetID (the frontends' subnet resource ID)" }}{{ end -}}
{{- if not .Values.azure.location }}{{ $missing = append $missing "azure.location (the region, e.g. westeurope)" }}{{ end -}}
{{- if and .Values.azure.workloadIdentity.enabled (not .Values.azure.workloadIdentity.clientID) }}{{ $missing = append $missing "azure.workloadIdentity.clientID (the managed identity's client ID; or set azure.workloadIdentity.enabled=false)" }}{{ end -}}
{{- else if eq $provider "aws" -}}
{{- if not .Values.aws.region }}{{ $missing = append $missing "aws.region (the NLBs' region, e.g. eu-west-1)" }}{{ end -}}
{{- else -}}
{{- if not .Values.haproxy.addressPool }}{{ $missing = append $missing "haproxy.addressPool (the CIDR of the frontend addresses, announced to your network)" }}{{ end -}}
{{- end -}}
{{- if not .Values.drain.clusterIP }}{{ $missing = append $missing "drain.clusterIP (a fixed, free address of the cluster's service range)" }}{{ end -}}
{{- if $missing -}}
{{- fail (printf "missing values for provider=%s: %s" $provider (join ", " $missing)) -}}
{{- end -}}
{{- end -}}

{{/* The data plane's name and selector labels (provider=haproxy). */}}
{{- define "zerodrop.dataPlaneName" -}}
{{- printf "%s-data-plane" (include "zerodrop.fullname" .) -}}
{{- end -}}

{{- define "zerodrop.dataPlaneSelectorLabels" -}}
app.kubernetes.io/name: {{ include "zerodrop.dataPlaneName" . }}
{{- end -}}

{{/* Is the Azure workload identity in use? */}}
{{- define "zerodrop.workloadIdentity" -}}
{{- if and (eq (toString .Values.provider) "azure") .Values.azure.workloadIdentity.enabled -}}true{{- end -}}
{{- end -}}

{{/*
A CEL test that the string expression given is the drain address. The API
server accepts an IPv6 address in any spelling (fd00:10:96:0:0:0:0:5a,
upper case) and kube-proxy captures each the same, so where the cluster's
CEL has the IP library (Kubernetes 1.31+: introduced in 1.30, usable in
stored expressions one release later) the addresses are compared parsed;
on 1.30 as strings, which catches only the spelling drain.clusterIP has.
*/}}
{{- define "zerodrop.isDrainAddress" -}}
{{- if semverCompare ">=1.31-0" .root.Capabilities.KubeVersion.Version -}}
(isIP({{ .v }}) && isIP(variables.drain) ? ip({{ .v }}) == ip(variables.drain) : {{ .v }} == variables.drain)
{{- else -}}
{{ .v }} == variables.drain
{{- end -}}
{{- end }}
