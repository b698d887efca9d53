package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"layerfs.dev/layerfs/internal/tokenfile"
)

// deployDir holds the Kubernetes manifests of a fleet (docs/scale-out.md).
const deployDir = "../../deploy/kubernetes"

// manifests are deploy/kubernetes's objects, each decoded strictly into
// its Kubernetes API type (an unknown or misspelt field fails).
type manifests struct {
	namespaces      []corev1.Namespace
	serviceAccounts []corev1.ServiceAccount
	configMaps      []corev1.ConfigMap
	secrets         []corev1.Secret
	services        []corev1.Service
	daemonSets      []appsv1.DaemonSet
	kustomization   struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	files map[string][]string // file -> the kinds it holds
}

func loadManifests(t *testing.T) *manifests {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, paths, "no manifests in %s", deployDir)
	m := &manifests{files: map[string][]string{}}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var tm metav1.TypeMeta
			require.NoError(t, yaml.Unmarshal([]byte(doc), &tm), "%s, document %d", p, i)
			name := filepath.Base(p)
			m.files[name] = append(m.files[name], tm.Kind)
			var into any
			switch tm.APIVersion + " " + tm.Kind {
			case "v1 Namespace":
				into = grow(&m.namespaces)
			case "v1 ServiceAccount":
				into = grow(&m.serviceAccounts)
			case "v1 ConfigMap":
				into = grow(&m.configMaps)
			case "v1 Secret":
				into = grow(&m.secrets)
			case "v1 Service":
				into = grow(&m.services)
			case "apps/v1 DaemonSet":
				into = grow(&m.daemonSets)
			case "kustomize.config.k8s.io/v1beta1 Kustomization":
				into = &m.kustomization
			default:
				t.Fatalf("%s, document %d: %s %s: a kind this test does not check", p, i, tm.APIVersion, tm.Kind)
			}
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), into), "%s, document %d (%s)", p, i, tm.Kind)
		}
	}
	return m
}

// grow appends a zero element to s and returns a pointer to it.
func grow[T any](s *[]T) *T {
	*s = append(*s, *new(T))
	return &(*s)[len(*s)-1]
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func only[T any](t *testing.T, what string, s []T) T {
	t.Helper()
	require.Len(t, s, 1, "want one %s", what)
	return s[0]
}

// TestKubernetesManifests checks deploy/kubernetes against the Kubernetes
// API types and against layerfsd itself: a privileged DaemonSet with
// /dev/fuse and the node's directory for the Store from host paths, the
// Store's URL, the token and the credentials from the one Secret, the
// settings from the ConfigMap, and a command line that layerfsd serve
// accepts (its real flags) meaning what the rest of the manifests say.
func TestKubernetesManifests(t *testing.T) {
	m := loadManifests(t)
	ns := only(t, "Namespace", m.namespaces)
	ds := only(t, "DaemonSet", m.daemonSets)
	secret := only(t, "Secret", m.secrets)
	cm := only(t, "ConfigMap", m.configMaps)
	sa := only(t, "ServiceAccount", m.serviceAccounts)
	svc := only(t, "Service", m.services)
	for _, o := range []metav1.ObjectMeta{ds.ObjectMeta, secret.ObjectMeta, cm.ObjectMeta, sa.ObjectMeta, svc.ObjectMeta} {
		assert.Equal(t, ns.Name, o.Namespace, "%s's namespace", o.Name)
	}
	assert.Equal(t, "privileged", ns.Labels["pod-security.kubernetes.io/enforce"], "Pod Security admits a privileged pod")

	// kustomization.yaml applies every manifest but the example Secret.
	assert.Equal(t, "Kustomization", m.kustomization.Kind)
	var want []string
	for f := range m.files {
		if f != "kustomization.yaml" && f != "secret.example.yaml" {
			want = append(want, f)
		}
	}
	slices.Sort(want)
	assert.Equal(t, want, slices.Sorted(slices.Values(m.kustomization.Resources)), "kustomization.yaml's resources")

	spec := ds.Spec.Template.Spec
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	require.NoError(t, err)
	assert.True(t, sel.Matches(labels.Set(ds.Spec.Template.Labels)), "the DaemonSet's selector matches its pods")
	assert.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ds.Spec.Template.Labels)), "the Service selects the DaemonSet's pods")
	assert.Equal(t, sa.Name, spec.ServiceAccountName)
	require.NotNil(t, spec.AutomountServiceAccountToken)
	assert.False(t, *spec.AutomountServiceAccountToken, "layerfsd needs no Kubernetes API token")

	c := only(t, "container", spec.Containers)
	require.NotNil(t, c.SecurityContext)
	require.NotNil(t, c.SecurityContext.Privileged)
	assert.True(t, *c.SecurityContext.Privileged, "privileged: FUSE, overlayfs, the sandboxes' namespaces")
	assert.Equal(t, []string{"layerfsd", "serve"}, c.Command)
	img := c.Image
	if i := strings.LastIndex(img, "/"); i >= 0 {
		img = img[i+1:]
	}
	assert.Regexp(t, `^layerfsd(:[\w.-]+)?$`, img, "the image the Dockerfile builds")
	dockerfile, err := os.ReadFile(filepath.Join(deployDir, "Dockerfile"))
	require.NoError(t, err)
	for _, want := range []string{"./cmd/layerfsd", "./cmd/layerfs-sandbox-init", "-t layerfsd", "/usr/local/bin/"} {
		assert.Contains(t, string(dockerfile), want, "the Dockerfile")
	}

	// The command line, with the container's variables as the kubelet
	// expands them, is one layerfsd serve accepts.
	args := expandArgs(t, c, cm, secret)
	f := parseServe(t, args)
	mounts := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.Name] = vm
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	hostPathAt := func(mountPath string) *corev1.HostPathVolumeSource {
		for name, vm := range mounts {
			if vm.MountPath == mountPath {
				return volumes[name].HostPath
			}
		}
		return nil
	}

	// /dev/fuse, a character device of the node's.
	fuse := hostPathAt("/dev/fuse")
	require.NotNil(t, fuse, "/dev/fuse from a host path")
	assert.Equal(t, "/dev/fuse", fuse.Path)
	require.NotNil(t, fuse.Type)
	assert.Equal(t, corev1.HostPathCharDev, *fuse.Type)

	// The Store's directory (cache, workspaces, the host's name) on the
	// node, so that a restarted pod is the same host with its workspaces.
	require.NotEmpty(t, f.store)
	storeVol := hostPathAt(f.store)
	require.NotNil(t, storeVol, "--store %s on a host path", f.store)
	require.NotNil(t, storeVol.Type)
	assert.Equal(t, corev1.HostPathDirectoryOrCreate, *storeVol.Type)
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == f.store {
			require.NotNil(t, vm.MountPropagation)
			assert.Equal(t, corev1.MountPropagationBidirectional, *vm.MountPropagation, "workspace mounts reach the node")
		}
	}

	// The Store's URL and the token: files of the Secret's volume.
	secretFile := func(path string) string {
		for name, vm := range mounts {
			v := volumes[name]
			rel, err := filepath.Rel(vm.MountPath, path)
			if v.Secret == nil || err != nil || strings.HasPrefix(rel, "..") {
				continue
			}
			assert.Equal(t, secret.Name, v.Secret.SecretName)
			for _, it := range v.Secret.Items {
				if it.Path == rel {
					return it.Key
				}
			}
		}
		t.Errorf("%s is no file of the Secret's volume", path)
		return ""
	}
	urlKey, tokenKey := secretFile(f.storeURL), secretFile(f.tokenFile)
	assert.Contains(t, secret.StringData, urlKey)
	assert.Contains(t, secret.StringData, tokenKey)
	assert.Regexp(t, `^postgres://[^:@/]+@[^/]+/\w+\?.*bucket=s3://`, secret.StringData[urlKey], "a Store URL without a password")
	tok := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tok, []byte(secret.StringData[tokenKey]), 0o400))
	_, _, err = tokenfile.Read(tok)
	assert.NoError(t, err, "the example token is one layerfsd takes")

	// What the flags say holds together: the advertised address is the
	// pod's, on the listener's port, which the probe and the Service use.
	assert.NoError(t, checkAdvertise(f.advertise, f.tcp))
	assert.Equal(t, "tcp://10.0.0.7"+f.tcp, f.advertise, "--advertise is the pod's address on --tcp's port")
	port := only(t, "container port", c.Ports)
	assert.Equal(t, fmt.Sprintf(":%d", port.ContainerPort), f.tcp)
	require.NotNil(t, c.ReadinessProbe)
	require.NotNil(t, c.ReadinessProbe.TCPSocket, "readiness: the TCP listener opens once the daemon serves")
	assert.Equal(t, port.Name, c.ReadinessProbe.TCPSocket.Port.StrVal, "the probe's port")
	assert.Equal(t, port.Name, only(t, "Service port", svc.Spec.Ports).TargetPort.StrVal, "the Service's target port")
	require.NotNil(t, spec.TerminationGracePeriodSeconds)
	assert.Greater(t, time.Duration(*spec.TerminationGracePeriodSeconds)*time.Second, f.grace,
		"the pod's grace period covers --grace and unmounting")
	assert.Contains(t, []string{"overlay", "fuse"}, f.dataPath)
	_, err = newLogger(&bytes.Buffer{}, f.logLevel)
	assert.NoError(t, err, "--log-level")
	assert.Equal(t, []string{"local"}, f.platforms)
}

// expandArgs is the container's args as the kubelet runs them: $(VAR)
// replaced by the container's variable (the pod's IP 10.0.0.7; the
// ConfigMap's and the Secret's values), each of which must exist.
func expandArgs(t *testing.T, c corev1.Container, cm corev1.ConfigMap, secret corev1.Secret) []string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch vf := e.ValueFrom; {
		case vf == nil:
			env[e.Name] = e.Value
		case vf.FieldRef != nil:
			assert.Equal(t, "status.podIP", vf.FieldRef.FieldPath, "%s", e.Name)
			env[e.Name] = "10.0.0.7"
		case vf.ConfigMapKeyRef != nil:
			assert.Equal(t, cm.Name, vf.ConfigMapKeyRef.Name, "%s", e.Name)
			v, ok := cm.Data[vf.ConfigMapKeyRef.Key]
			assert.True(t, ok, "%s: the ConfigMap has no key %s", e.Name, vf.ConfigMapKeyRef.Key)
			env[e.Name] = v
		case vf.SecretKeyRef != nil:
			assert.Equal(t, secret.Name, vf.SecretKeyRef.Name, "%s", e.Name)
			v, ok := secret.StringData[vf.SecretKeyRef.Key]
			assert.True(t, ok, "%s: the Secret has no key %s", e.Name, vf.SecretKeyRef.Key)
			env[e.Name] = v
		default:
			t.Errorf("%s: a source this test does not check", e.Name)
		}
	}
	for _, want := range []string{"PGPASSWORD", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		assert.Contains(t, env, want, "the Store's credentials")
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	var out []string
	for _, a := range c.Args {
		out = append(out, ref.ReplaceAllStringFunc(a, func(s string) string {
			v, ok := env[s[2:len(s)-1]]
			assert.True(t, ok, "argument %q names %s, which the container does not define", a, s)
			return v
		}))
	}
	return out
}

// parseServe parses args with layerfsd serve's own flags.
func parseServe(t *testing.T, args []string) serveFlags {
	t.Helper()
	var f serveFlags
	cmd := serveCmd()
	require.NoError(t, cmd.ParseFlags(args), "layerfsd serve %s", strings.Join(args, " "))
	fl := cmd.Flags()
	get := func(name string) string {
		v, err := fl.GetString(name)
		require.NoError(t, err)
		return v
	}
	f.store, f.storeURL, f.tcp, f.tokenFile, f.advertise = get("store"), get("store-url-file"), get("tcp"), get("token-file"), get("advertise")
	f.dataPath, f.logLevel = get("data-path"), get("log-level")
	var err error
	f.grace, err = fl.GetDuration("grace")
	require.NoError(t, err)
	f.platforms, err = fl.GetStringSlice("platform")
	require.NoError(t, err)
	require.Empty(t, cmd.Flags().Args(), "arguments that are no flags")
	return f
}
