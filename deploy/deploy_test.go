package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	kyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/mcpaudit/mcpaudit/dashboards"
	"github.com/mcpaudit/mcpaudit/rules/promtest"
)

// Ports of the collector's defaults (serve.ingest_listen, grpc_listen,
// api_listen), which every deployment publishes.
const (
	portOTLPGRPC = 4317
	portOTLPHTTP = 4318
	portAPI      = 9464
)

// yamlFiles lists every YAML file under the deploy directory.
func yamlFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 15 {
		t.Fatalf("only %d YAML files under deploy/: %v", len(out), out)
	}
	return out
}

// TestYAMLParses: every YAML document under deploy/ parses.
func TestYAMLParses(t *testing.T) {
	for _, p := range yamlFiles(t) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		docs := 0
		for {
			var v any
			err := dec.Decode(&v)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Errorf("%s: %v", p, err)
				break
			}
			docs++
		}
		if docs == 0 {
			t.Errorf("%s holds no YAML document", p)
		}
	}
}

// manifests decodes every Kubernetes manifest of kubernetes/ strictly: an
// unknown or duplicate field is an error.
func manifests(t *testing.T) []runtime.Object {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	ser := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme, kjson.SerializerOptions{Yaml: true, Strict: true})
	var kz struct {
		Resources []string `yaml:"resources"`
	}
	readYAML(t, "kubernetes/kustomization.yaml", &kz)
	if len(kz.Resources) == 0 {
		t.Fatal("kubernetes/kustomization.yaml lists no resources")
	}
	files, _ := filepath.Glob("kubernetes/*.yaml")
	var out []runtime.Object
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		if !slices.Contains(kz.Resources, filepath.Base(f)) {
			t.Errorf("%s is not in kustomization.yaml's resources", f)
		}
	}
	for _, res := range kz.Resources {
		f := filepath.Join("kubernetes", res)
		b, err := os.ReadFile(f)
		if err != nil {
			t.Errorf("kustomization.yaml lists %s: %v", res, err)
			continue
		}
		r := kyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, _, err := ser.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s, document %d: %v", f, i+1, err)
				continue
			}
			out = append(out, obj)
		}
	}
	return out
}

func stripComments(b []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(append(out, l...), '\n')
		}
	}
	return out
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// one returns the only object of type T named name.
func one[T runtime.Object](t *testing.T, objs []runtime.Object, name string) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok && reflect.ValueOf(v).Elem().FieldByName("ObjectMeta").FieldByName("Name").String() == name {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("%d %T named %s, want 1", len(found), zero, name)
	}
	return found[0]
}

// TestKubernetes decodes the manifests into the API types and checks that
// they fit together: probes, ports, selectors, the config and the tokens.
func TestKubernetes(t *testing.T) {
	objs := manifests(t)
	sts := one[*appsv1.StatefulSet](t, objs, "mcpaudit")
	svc := one[*corev1.Service](t, objs, "mcpaudit")
	headless := one[*corev1.Service](t, objs, "mcpaudit-headless")
	cm := one[*corev1.ConfigMap](t, objs, "mcpaudit-config")
	secret := one[*corev1.Secret](t, objs, "mcpaudit-tokens")
	pdb := one[*policyv1.PodDisruptionBudget](t, objs, "mcpaudit")
	sm := one[*monitoringv1.ServiceMonitor](t, objs, "mcpaudit")
	one[*corev1.ServiceAccount](t, objs, "mcpaudit")
	one[*monitoringv1.PrometheusRule](t, objs, "mcpaudit")

	pod := sts.Spec.Template
	podLabels := labels.Set(pod.Labels)
	sel, err := metav1LabelSelector(sts.Spec.Selector.MatchLabels)
	if err != nil || !sel.Matches(podLabels) {
		t.Errorf("the StatefulSet's selector does not match its pods' labels %v", pod.Labels)
	}
	if sts.Spec.ServiceName != headless.Name || headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("serviceName %q, want the headless Service %s", sts.Spec.ServiceName, headless.Name)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if !reflect.DeepEqual(ports, map[string]int32{"otlp-grpc": portOTLPGRPC, "otlp-http": portOTLPHTTP, "http-api": portAPI}) {
		t.Errorf("container ports %v are not the collector's", ports)
	}
	t.Run("probes", func(t *testing.T) {
		for name, want := range map[string]struct {
			p    *corev1.Probe
			path string
		}{"startup": {c.StartupProbe, "/healthz"}, "liveness": {c.LivenessProbe, "/healthz"}, "readiness": {c.ReadinessProbe, "/readyz"}} {
			if want.p == nil || want.p.HTTPGet == nil {
				t.Errorf("no %s probe over HTTP", name)
				continue
			}
			g := want.p.HTTPGet
			if g.Path != want.path || ports[g.Port.String()] != portAPI {
				t.Errorf("%s probe GET %s on port %s, want %s on the API port", name, g.Path, g.Port.String(), want.path)
			}
		}
	})
	t.Run("services", func(t *testing.T) {
		for _, s := range []*corev1.Service{svc, headless} {
			if !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
				t.Errorf("Service %s selects %v, not the pods", s.Name, s.Spec.Selector)
			}
			for _, p := range s.Spec.Ports {
				if ports[p.TargetPort.String()] != p.Port {
					t.Errorf("Service %s port %s: targetPort %s is not a container port of the same number", s.Name, p.Name, p.TargetPort.String())
				}
			}
		}
	})
	t.Run("config_and_tokens", func(t *testing.T) {
		var configPath string
		for i, a := range c.Args {
			if a == "--config" && i+1 < len(c.Args) {
				configPath = c.Args[i+1]
			}
		}
		var mounted bool
		for _, m := range c.VolumeMounts {
			for _, v := range pod.Spec.Volumes {
				if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
					_, ok := cm.Data[strings.TrimPrefix(configPath, m.MountPath+"/")]
					mounted = ok && strings.HasPrefix(configPath, m.MountPath+"/")
				}
			}
		}
		if !mounted {
			t.Errorf("--config %s is not a key of ConfigMap %s mounted in the container", configPath, cm.Name)
		}
		var fromSecret bool
		for _, e := range c.EnvFrom {
			fromSecret = fromSecret || (e.SecretRef != nil && e.SecretRef.Name == secret.Name)
		}
		if !fromSecret {
			t.Errorf("the container does not take its environment from Secret %s", secret.Name)
		}
		for _, ref := range regexp.MustCompile(`\$\{(\w+)\}`).FindAllStringSubmatch(cm.Data["mcpaudit.yaml"], -1) {
			if _, ok := secret.StringData[ref[1]]; !ok {
				t.Errorf("the config reads ${%s}, which Secret %s does not hold", ref[1], secret.Name)
			}
		}
	})
	t.Run("data_volume", func(t *testing.T) {
		var dataDir bool
		for _, m := range c.VolumeMounts {
			if m.MountPath == "/var/lib/mcpaudit" && slices.ContainsFunc(sts.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == m.Name }) {
				dataDir = true
			}
		}
		if !dataDir || !strings.Contains(cm.Data["mcpaudit.yaml"], "data_dir: /var/lib/mcpaudit") {
			t.Error("serve.data_dir is not /var/lib/mcpaudit on a persistent volume")
		}
	})
	t.Run("security", func(t *testing.T) {
		ps := pod.Spec.SecurityContext
		if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser == 0 {
			t.Error("the pod does not run as a non-root user")
		}
		cs := c.SecurityContext
		if cs == nil || cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation || cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem {
			t.Error("the container may escalate privileges or write its root filesystem")
		}
		if !regexp.MustCompile(`:v\d+\.\d+\.\d+$`).MatchString(c.Image) {
			t.Errorf("image %s is not pinned to a release", c.Image)
		}
	})
	t.Run("pdb_and_servicemonitor", func(t *testing.T) {
		if s, err := metav1LabelSelector(pdb.Spec.Selector.MatchLabels); err != nil || !s.Matches(podLabels) {
			t.Error("the PodDisruptionBudget does not select the pods")
		}
		matched := 0
		for _, s := range []*corev1.Service{svc, headless} {
			if labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(s.Labels)) {
				matched++
				if s != svc {
					t.Errorf("the ServiceMonitor selects Service %s too: the pod would be scraped twice", s.Name)
				}
			}
		}
		if matched == 0 {
			t.Errorf("the ServiceMonitor selects no Service")
		}
		for _, e := range sm.Spec.Endpoints {
			if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == e.Port }) || e.Path != "/metrics" {
				t.Errorf("ServiceMonitor endpoint %s%s is not the Service's metrics", e.Port, e.Path)
			}
		}
		// The job label is the Service name: the rules' job.
		if svc.Name != "mcpaudit" {
			t.Errorf("Service %s: the scrape job would not be mcpaudit", svc.Name)
		}
	})
}

func metav1LabelSelector(m map[string]string) (labels.Selector, error) {
	if len(m) == 0 {
		return nil, errors.New("empty selector")
	}
	return labels.SelectorFromSet(m), nil
}

// TestPrometheusRuleEqualsRules: the PrometheusRule holds exactly the groups
// of prometheus/rules.yaml.
func TestPrometheusRuleEqualsRules(t *testing.T) {
	var file, pr struct {
		Groups []map[string]any `yaml:"groups"`
		Spec   struct {
			Groups []map[string]any `yaml:"groups"`
		} `yaml:"spec"`
	}
	readYAML(t, "prometheus/rules.yaml", &file)
	readYAML(t, "kubernetes/prometheusrule.yaml", &pr)
	if len(file.Groups) == 0 || !reflect.DeepEqual(file.Groups, pr.Spec.Groups) {
		t.Errorf("kubernetes/prometheusrule.yaml's groups differ from prometheus/rules.yaml (%d and %d groups): run go generate ./rules",
			len(pr.Spec.Groups), len(file.Groups))
	}
}

// composeFile is the part of compose.yaml the tests read.
type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       map[string]string `yaml:"build"`
		Command     []string          `yaml:"command"`
		Volumes     []string          `yaml:"volumes"`
		Ports       []string          `yaml:"ports"`
		Environment map[string]string `yaml:"environment"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// TestCompose: images pinned, every mounted file present, the collector's
// ports published on loopback, the provisioning paths where the files are
// mounted.
func TestCompose(t *testing.T) {
	var c composeFile
	readYAML(t, "compose/compose.yaml", &c)
	want := []string{"mcpaudit", "clickhouse", "prometheus", "alertmanager", "grafana"}
	for _, s := range want {
		if _, ok := c.Services[s]; !ok {
			t.Errorf("compose.yaml has no %s service", s)
		}
	}
	mounts := map[string]string{} // target → source
	for name, s := range c.Services {
		if s.Build != nil {
			ctx := filepath.Join("compose", s.Build["context"])
			if _, err := os.Stat(filepath.Join(ctx, s.Build["dockerfile"])); err != nil {
				t.Errorf("%s: build %v: %v", name, s.Build, err)
			}
		} else if !regexp.MustCompile(`^[\w./-]+:v?\d+(\.\d+)+$`).MatchString(s.Image) {
			t.Errorf("%s: image %q is not pinned to a version", name, s.Image)
		}
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			src, dst := parts[0], parts[1]
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(filepath.Join("compose", src)); err != nil {
					t.Errorf("%s mounts %s: %v", name, src, err)
				}
				mounts[dst] = filepath.Join("compose", src)
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("%s mounts volume %s, which is not declared", name, src)
			}
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %s beyond loopback", name, p)
			}
		}
	}
	ports := c.Services["mcpaudit"].Ports
	for _, p := range []int{portOTLPGRPC, portOTLPHTTP, portAPI} {
		if !slices.Contains(ports, fmt.Sprintf("127.0.0.1:%d:%d", p, p)) {
			t.Errorf("mcpaudit does not publish port %d: %v", p, ports)
		}
	}
	// The collector reads the config it is given.
	cmd := c.Services["mcpaudit"].Command
	if i := slices.Index(cmd, "--config"); i < 0 || mounts[cmd[i+1]] != filepath.Join("compose", "mcpaudit.yaml") {
		t.Errorf("mcpaudit's --config is not the mounted compose/mcpaudit.yaml: %v", cmd)
	}
	// Prometheus loads the generated rules from where they are mounted.
	var prom struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "compose/prometheus.yml", &prom)
	for _, r := range prom.RuleFiles {
		if mounts[filepath.Join("/etc/prometheus", r)] != "prometheus/rules.yaml" {
			t.Errorf("rule file %s is not the mounted prometheus/rules.yaml", r)
		}
	}
	if len(prom.ScrapeConfigs) == 0 || prom.ScrapeConfigs[0].JobName != "mcpaudit" ||
		!slices.Contains(prom.ScrapeConfigs[0].StaticConfigs[0].Targets, fmt.Sprintf("mcpaudit:%d", portAPI)) {
		t.Errorf("Prometheus does not scrape job mcpaudit at mcpaudit:%d", portAPI)
	}
	// The relays dashboard and the relay alerts read the relays' job (op23
	// D8: the compose Prometheus had none, so they showed nothing).
	relayJob := false
	for _, sc := range prom.ScrapeConfigs {
		relayJob = relayJob || sc.JobName == dashboards.DefaultRelayJob && len(sc.StaticConfigs) > 0 && len(sc.StaticConfigs[0].Targets) > 0
	}
	if !relayJob {
		t.Errorf("Prometheus has no scrape job %s with a target (the relays' --metrics-listen)", dashboards.DefaultRelayJob)
	}
	// Grafana: the provisioned dashboards are the generated ones, at the
	// provider's path.
	var provider struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/mcpaudit.yaml", &provider)
	if src := mounts[provider.Providers[0].Options.Path]; src != "grafana/dashboards" {
		t.Errorf("Grafana's dashboard provider reads %s, where %q is mounted, not grafana/dashboards", provider.Providers[0].Options.Path, src)
	}
	if mounts["/etc/grafana/provisioning/datasources"] != "grafana/provisioning/datasources" {
		t.Error("the data source provisioning is not mounted")
	}
	var ds struct {
		Datasources []struct {
			URL string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yaml", &ds)
	if ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("the data source %s is not the compose prometheus service", ds.Datasources[0].URL)
	}
	// Every ${VAR} that compose or the collector config needs is in .env.example.
	example, err := os.ReadFile("compose/.env.example")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile("compose/compose.yaml")
	cfg, _ := os.ReadFile("compose/mcpaudit.yaml")
	for _, m := range regexp.MustCompile(`\$\{(\w+)`).FindAllStringSubmatch(string(raw)+string(cfg), -1) {
		if !strings.Contains(string(example), m[1]+"=") {
			t.Errorf("${%s} is used but not in .env.example", m[1])
		}
	}
	for _, m := range regexp.MustCompile(`\$\{(\w+)`).FindAllStringSubmatch(string(cfg), -1) {
		if _, ok := c.Services["mcpaudit"].Environment[m[1]]; !ok {
			t.Errorf("mcpaudit.yaml reads ${%s}, which the mcpaudit service's environment does not set", m[1])
		}
	}
}

// TestPromtoolCheckConfig runs the real promtool over the compose
// Prometheus configuration, with the rules where it expects them.
func TestPromtoolCheckConfig(t *testing.T) {
	promtool := promtest.Binary(t, "promtool")
	dir := t.TempDir()
	for src, dst := range map[string]string{"compose/prometheus.yml": "prometheus.yml", "prometheus/rules.yaml": "rules.yaml"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(promtool, "check", "config", filepath.Join(dir, "prometheus.yml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") || !strings.Contains(string(out), "rules found") {
		t.Errorf("promtool check config did not check the rules:\n%s", out)
	}
}

// TestAmtoolCheckConfig runs the real amtool over the compose Alertmanager
// configuration.
func TestAmtoolCheckConfig(t *testing.T) {
	amtool := promtest.Binary(t, "amtool")
	out, err := exec.Command(amtool, "check-config", "compose/alertmanager.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("amtool check-config: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("amtool check-config:\n%s", out)
	}
}

// TestDockerfile checks what can be checked without building: pinned base
// images, a non-root user, a health check through a real command, the OCI
// labels, the ports and the files it copies.
func TestDockerfile(t *testing.T) {
	lines := dockerfile(t, "../Dockerfile")
	var froms, exposes []string
	var user, healthcheck string
	labelKeys := map[string]bool{}
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			froms = append(froms, strings.Fields(rest)[0])
		case "USER":
			user = rest
		case "HEALTHCHECK":
			healthcheck = rest
		case "EXPOSE":
			exposes = append(exposes, strings.Fields(rest)...)
		case "LABEL":
			for _, m := range regexp.MustCompile(`([\w.]+)=`).FindAllStringSubmatch(rest, -1) {
				labelKeys[m[1]] = true
			}
		case "COPY":
			f := strings.Fields(rest)
			if !strings.HasPrefix(f[0], "--from") {
				for _, src := range f[:len(f)-1] {
					if _, err := os.Stat(filepath.Join("..", src)); err != nil {
						t.Errorf("COPY %s: %v", src, err)
					}
				}
			}
		}
	}
	if len(froms) < 2 {
		t.Errorf("FROM %v: want a multi-stage build", froms)
	}
	for _, f := range froms {
		if strings.HasSuffix(f, ":latest") || !strings.Contains(f, ":") {
			t.Errorf("base image %s is not pinned", f)
		}
	}
	if user == "" || strings.HasPrefix(user, "0") || strings.HasPrefix(user, "root") {
		t.Errorf("USER %q: the image must not run as root", user)
	}
	if !strings.Contains(healthcheck, `"healthcheck"`) || !strings.Contains(healthcheck, fmt.Sprintf(":%d/healthz", portAPI)) {
		t.Errorf("HEALTHCHECK %q does not run mcpaudit healthcheck on the API port", healthcheck)
	}
	for _, k := range []string{"title", "description", "source", "licenses", "version", "revision", "created"} {
		if !labelKeys["org.opencontainers.image."+k] {
			t.Errorf("no OCI label org.opencontainers.image.%s", k)
		}
	}
	slices.Sort(exposes)
	if want := []string{fmt.Sprint(portOTLPGRPC), fmt.Sprint(portOTLPHTTP), fmt.Sprint(portAPI)}; !slices.Equal(exposes, want) {
		t.Errorf("EXPOSE %v, want %v", exposes, want)
	}
	joined := strings.Join(lines, "\n")
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/mcpaudit", "internal/version.version=", "internal/version.revision="} {
		if !strings.Contains(joined, want) {
			t.Errorf("the build does not %q", want)
		}
	}
}

// dockerfile returns the instructions of a Dockerfile, continuation lines
// joined and comments dropped.
func dockerfile(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var cur strings.Builder
	for _, l := range strings.Split(string(b), "\n") {
		s := strings.TrimSpace(l)
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		if strings.HasSuffix(s, "\\") {
			cur.WriteString(strings.TrimSuffix(s, "\\") + " ")
			continue
		}
		cur.WriteString(s)
		out = append(out, cur.String())
		cur.Reset()
	}
	return out
}

// TestSystemdUnit: the unit has its sections, runs the installed binary on
// the installed config, and keeps its data in its state directory.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile("systemd/mcpaudit.service")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]map[string][]string{}
	var cur string
	for i, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			cur = l[1 : len(l)-1]
			sections[cur] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || cur == "" {
				t.Fatalf("line %d: %q is not key=value in a section", i+1, l)
			}
			sections[cur][k] = append(sections[cur][k], v)
		}
	}
	for _, s := range []string{"Unit", "Service", "Install"} {
		if sections[s] == nil {
			t.Errorf("no [%s] section", s)
		}
	}
	svc := sections["Service"]
	exec := strings.Fields(svc["ExecStart"][0])
	if exec[0] != "/usr/local/bin/mcpaudit" || exec[1] != "serve" {
		t.Errorf("ExecStart %v does not run mcpaudit serve", exec)
	}
	if i := slices.Index(exec, "--data-dir"); i < 0 || exec[i+1] != "/var/lib/"+svc["StateDirectory"][0] {
		t.Errorf("--data-dir is not the StateDirectory /var/lib/%v", svc["StateDirectory"])
	}
	if svc["DynamicUser"][0] != "yes" && svc["User"] == nil {
		t.Error("the service runs as root")
	}
	if i := slices.Index(exec, "--config"); i < 0 || !strings.Contains(string(b), "deploy/systemd/mcpaudit.yaml "+exec[i+1]) {
		t.Errorf("--config is not where the install steps put deploy/systemd/mcpaudit.yaml")
	}
	// serve reads tokens and certificates again on SIGHUP, and only then.
	if r := svc["ExecReload"]; len(r) != 1 || !strings.Contains(r[0], "kill -HUP $MAINPID") {
		t.Errorf("ExecReload %v does not send SIGHUP to serve", r)
	}
}

// TestLicense: the repository is under the Apache License 2.0, as the image
// label says.
func TestLicense(t *testing.T) {
	b, err := os.ReadFile("../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "Apache License") || !strings.Contains(string(b), "Version 2.0, January 2004") ||
		!strings.Contains(string(b), "END OF TERMS AND CONDITIONS") {
		t.Error("LICENSE is not the Apache License 2.0")
	}
}
