#!/usr/bin/env python3
"""Checks the Kubernetes deployment (run by deploy/test.sh):

1. the chart renders with Helm's own engine (helm-python-sdk, Helm v4 as a library), and the
   committed manifests are exactly that rendering without Helm hooks (render.py --check); the
   chart's templates follow its values (optional keys, the node list);
2. every core object validates against the Kubernetes OpenAPI schemas of every supported
   Kubernetes version, 1.27 to 1.33 (kubernetes-validate, offline schemas, strict: unknown fields
   refused); cert-manager objects (CRDs, no bundled schema) have their required fields;
3. invariants: the DaemonSet runs with hostPID on GPU nodes (toleration for nvidia.com/gpu),
   mounts /proc, /dev/kmsg and /var/log/pods read-only, probes the health port, has resources;
   the Service has the UDP QUIC port; the PDB selects the collector pods; agent certificates
   carry the node name as CN; ...
4. the agent and collector TOML of the ConfigMaps are accepted by the real binaries
   (`oomlens-agent print-config --config FILE`, `oomlens-collector print-config --config FILE`).

Usage: test_manifests.py --agent-bin PATH --collector-bin PATH
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import kubernetes_validate
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import render  # noqa: E402

# The Kubernetes versions the chart supports (Chart.yaml kubeVersion >= 1.27).
KUBERNETES_VERSIONS = ["1.27.0", "1.28.0", "1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0"]
CHART = HERE / "helm" / "oomlens"
MANIFEST = HERE / "manifests" / "oomlens.yaml"
ARGS = None


def load_manifests():
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def by_kind(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    if not found:
        raise AssertionError(f"no {kind} {name or ''}")
    return found


def values():
    return yaml.safe_load((CHART / "values.yaml").read_text())


def lookup(vals, path):
    v = vals
    for part in path.split("."):
        v = v[part]
    return v


class Rendering(unittest.TestCase):
    def test_committed_manifests_are_the_chart_rendered_by_helm(self):
        r = subprocess.run([sys.executable, str(HERE / "render.py"), "--check"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
        chart = render.render_chart()
        self.assertEqual(
            sorted((d for d in chart if not render.is_hook(d)), key=key), sorted(load_manifests(), key=key)
        )
        # The migration Job is a Helm hook only: `kubectl apply` cannot update a Job.
        self.assertEqual([d["metadata"]["name"] for d in chart if render.is_hook(d)], ["oomlens-migrate"])
        self.assertFalse([d for d in load_manifests() if d["kind"] == "Job"])

    def test_release_aware_names_namespace_images_and_pull_secrets(self):
        docs = render.render_chart(
            {"imagePullSecrets": [{"name": "regcred"}], "agent": {"image": {"tag": "9.9.9"}}},
            release="prod",
            namespace="gpu",
        )
        for d in docs:
            with self.subTest(kind=d["kind"], name=d["metadata"]["name"]):
                self.assertTrue(d["metadata"]["name"].startswith("prod-oomlens"), d["metadata"]["name"])
                self.assertEqual(d["metadata"]["namespace"], "gpu")
                self.assertEqual(d["metadata"]["labels"]["app.kubernetes.io/instance"], "prod")
        ds = by_kind(docs, "DaemonSet", "prod-oomlens-agent")[0]["spec"]["template"]["spec"]
        self.assertEqual(ds["containers"][0]["image"], "ghcr.io/oomlens/oomlens-agent:9.9.9")
        self.assertEqual(ds["imagePullSecrets"], [{"name": "regcred"}])
        dep = by_kind(docs, "Deployment", "prod-oomlens-collector")[0]["spec"]["template"]["spec"]
        chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
        self.assertEqual(dep["containers"][0]["image"], f"ghcr.io/oomlens/oomlens-collector:{chart['appVersion']}")
        # The agents find the collector of this release, whose certificate carries that name.
        agent_cfg = by_kind(docs, "ConfigMap", "prod-oomlens-agent")[0]["data"]["agent.toml"]
        self.assertIn('collectors = ["prod-oomlens-collector.gpu.svc:4433"]', agent_cfg)
        cert = by_kind(docs, "Certificate", "prod-oomlens-collector")[0]
        self.assertIn("prod-oomlens-collector.gpu.svc", cert["spec"]["dnsNames"])

    def test_a_config_change_rolls_the_pods(self):
        def checksums(values):
            docs = render.render_chart(values)
            return [
                by_kind(docs, kind)[0]["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
                for kind in ("DaemonSet", "Deployment")
            ]

        base = checksums(None)
        agent = values()["agent"]["config"] + "\n# changed\n"
        changed = checksums({"agent": {"config": agent}})
        self.assertNotEqual(base[0], changed[0])
        self.assertEqual(base[1], changed[1], "only the changed component rolls")

    def test_optional_monitoring_objects(self):
        off = render.render_chart()
        self.assertFalse([d for d in off if d["apiVersion"].startswith("monitoring.coreos.com/")])
        on = render.render_chart(
            {
                "serviceMonitor": {"enabled": True, "labels": {"release": "kps"}},
                "prometheusRule": {"enabled": True},
                "grafanaDashboard": {"enabled": True},
            }
        )
        sm = by_kind(on, "ServiceMonitor")[0]
        svc = by_kind(on, "Service")[0]
        self.assertEqual(sm["metadata"]["labels"]["release"], "kps")
        self.assertTrue(set(sm["spec"]["selector"]["matchLabels"].items()) <= set(svc["metadata"]["labels"].items()))
        self.assertIn("metrics", [p["name"] for p in svc["spec"]["ports"]])
        pm = by_kind(on, "PodMonitor")[0]
        ds_labels = by_kind(on, "DaemonSet")[0]["spec"]["template"]["metadata"]["labels"]
        self.assertTrue(set(pm["spec"]["selector"]["matchLabels"].items()) <= set(ds_labels.items()))
        # The alert rules are deploy/prometheus/alerts.yaml (promtool-tested), the dashboard is
        # deploy/grafana's (built and checked by build.py).
        rules = yaml.safe_load((HERE.parent / "prometheus" / "alerts.yaml").read_text())
        self.assertEqual(by_kind(on, "PrometheusRule")[0]["spec"], rules)
        dash = by_kind(on, "ConfigMap", "oomlens-dashboard")[0]
        self.assertEqual(dash["metadata"]["labels"]["grafana_dashboard"], "1")
        self.assertEqual(
            json.loads(dash["data"]["oomlens-dashboard.json"]),
            json.loads((HERE.parent / "grafana" / "oomlens-dashboard.json").read_text()),
        )
        for version in (KUBERNETES_VERSIONS[0], KUBERNETES_VERSIONS[-1]):
            kubernetes_validate.validate(dash, version, strict=True)

    def test_values_schema_refuses_mistakes(self):
        import helm_python

        for bad, where in [
            ({"collector": {"replicas": "two"}}, "/collector/replicas"),
            ({"agent": {"imagePullPolicy": "Always"}}, "imagePullPolicy"),
            ({"agent": {"image": {"pullPolicy": "Sometimes"}}}, "/agent/image/pullPolicy"),
            ({"collector": {"clickhouse": {"url": "clickhouse:8123"}}}, "/collector/clickhouse/url"),
            ({"certificates": {"agentNodes": ["Bad_Node"]}}, "/certificates/agentNodes/0"),
            ({"collector": {"alerts": {"alertmanagerUrls": ["am:9093"]}}}, "/collector/alerts/alertmanagerUrls/0"),
            ({"collector": {"alerts": {"webhooks": [{"url": "https://h/x", "format": "teams"}]}}},
             "/collector/alerts/webhooks/0/format"),
        ]:
            with self.subTest(where=where):
                with self.assertRaises(helm_python.HelmError) as err:
                    render.render_chart(bad)
                self.assertIn(where, str(err.exception))

    def test_notes_name_the_release(self):
        import helm_python

        helm_python.disable_logging()
        chart = helm_python.Chart.load(str(CHART))
        try:
            notes = chart.render({}, name="prod", namespace="gpu", is_install=True)["oomlens/templates/NOTES.txt"]
        finally:
            chart.close()
        self.assertIn("prod-oomlens-collector.gpu.svc:4433", notes)
        self.assertIn("kubectl -n gpu get pods -l app.kubernetes.io/instance=prod", notes)

    def test_the_templates_follow_the_values(self):
        # Optional keys disappear when emptied; the Certificates follow the node list.
        docs = render.render_chart({"agent": {"runtimeClassName": ""}, "certificates": {"agentNodes": ["a", "b", "c"]}})
        self.assertNotIn("runtimeClassName", by_kind(docs, "DaemonSet")[0]["spec"]["template"]["spec"])
        certs = [d for d in docs if d["kind"] == "Certificate" and d["metadata"]["name"].startswith("oomlens-agent-")]
        self.assertEqual([c["spec"]["commonName"] for c in certs], ["a", "b", "c"])

    def test_chart_metadata(self):
        chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
        self.assertEqual((chart["apiVersion"], chart["name"]), ("v2", "oomlens"))
        self.assertRegex(chart["version"], r"^\d+\.\d+\.\d+$")


class Schemas(unittest.TestCase):
    def test_core_objects_validate_strictly_on_every_supported_version(self):
        docs = [d for d in render.render_chart() if not d["apiVersion"].startswith("cert-manager.io/")]
        self.assertEqual(
            sorted(d["kind"] for d in docs),
            sorted(["ConfigMap", "DaemonSet", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "Job"]),
        )
        for version in KUBERNETES_VERSIONS:
            for d in docs:
                with self.subTest(version=version, kind=d["kind"], name=d["metadata"]["name"]):
                    kubernetes_validate.validate(d, version, strict=True)

    def test_a_broken_object_is_refused(self):
        ds = by_kind(load_manifests(), "DaemonSet")[0]
        ds["spec"]["template"]["spec"]["hostPid"] = True  # misspelt
        for version in (KUBERNETES_VERSIONS[0], KUBERNETES_VERSIONS[-1]):
            with self.assertRaises(kubernetes_validate.ValidationError):
                kubernetes_validate.validate(ds, version, strict=True)

    def test_cert_manager_objects_have_required_fields(self):
        docs = [d for d in load_manifests() if d["apiVersion"].startswith("cert-manager.io/")]
        issuers = {d["metadata"]["name"] for d in docs if d["kind"] == "Issuer"}
        self.assertEqual(issuers, {"oomlens-selfsigned", "oomlens-ca"})
        for d in docs:
            with self.subTest(name=d["metadata"]["name"]):
                self.assertEqual(d["apiVersion"], "cert-manager.io/v1")
                self.assertIn(d["kind"], ("Issuer", "Certificate"))
                if d["kind"] == "Issuer":
                    self.assertEqual(len([k for k in ("selfSigned", "ca") if k in d["spec"]]), 1)
                    continue
                spec = d["spec"]
                self.assertTrue(spec["secretName"])
                self.assertIn(spec["issuerRef"]["name"], issuers)
                self.assertIn(spec["issuerRef"]["kind"], ("Issuer", "ClusterIssuer"))
                self.assertTrue(spec.get("commonName") or spec.get("dnsNames"))
                for k in ("duration", "renewBefore"):
                    if k in spec:
                        self.assertRegex(spec[k], r"^\d+h$")
                if "renewBefore" in spec:
                    self.assertLess(int(spec["renewBefore"][:-1]), int(spec["duration"][:-1]))


class Invariants(unittest.TestCase):
    def setUp(self):
        # Everything the chart installs (the manifests are the same without the hook Job).
        self.docs = render.render_chart()
        self.ds = by_kind(self.docs, "DaemonSet", "oomlens-agent")[0]
        self.pod = self.ds["spec"]["template"]["spec"]
        self.agent = self.pod["containers"][0]

    def mount_of(self, container, pod, host_path):
        vols = {v["name"]: v for v in pod["volumes"]}
        for m in container["volumeMounts"]:
            hp = vols[m["name"]].get("hostPath")
            if hp and hp["path"] == host_path:
                return m, hp
        raise AssertionError(f"{host_path} is not mounted")

    def test_agent_daemonset_on_gpu_nodes(self):
        self.assertTrue(self.pod["hostPID"])
        self.assertFalse(self.pod.get("hostNetwork", False))
        self.assertTrue(any(t["key"] == "nvidia.com/gpu" and t["operator"] == "Exists" for t in self.pod["tolerations"]))
        self.assertTrue(self.pod["nodeSelector"])
        self.assertEqual(self.pod.get("runtimeClassName"), "nvidia")
        env = {e["name"]: e for e in self.agent["env"]}
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"]["value"], "all")
        self.assertEqual(env["NVIDIA_DRIVER_CAPABILITIES"]["value"], "utility")
        self.assertEqual(env["OOMLENS_NODE"]["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName")
        self.assertNotIn("nvidia.com/gpu", json.dumps(self.agent["resources"]), "the agent must not take a GPU")

    def test_agent_read_only_host_mounts(self):
        for path, type_ in [("/proc", "Directory"), ("/dev/kmsg", "CharDevice"), ("/var/log/pods", "DirectoryOrCreate"),
                            ("/var/lib/kubelet/pod-resources", "DirectoryOrCreate")]:
            with self.subTest(path=path):
                m, hp = self.mount_of(self.agent, self.pod, path)
                self.assertTrue(m.get("readOnly"), path)
                self.assertEqual(hp["type"], type_)
        m, _ = self.mount_of(self.agent, self.pod, "/var/lib/oomlens")
        self.assertFalse(m.get("readOnly", False), "the spool is written")
        self.assertEqual(self.mount_of(self.agent, self.pod, "/proc")[0]["mountPath"], "/host/proc")

    def test_agent_config_matches_the_mounts(self):
        cfg = by_kind(self.docs, "ConfigMap", "oomlens-agent")[0]["data"]["agent.toml"]
        mounts = {m["mountPath"] for m in self.agent["volumeMounts"]}
        for needle, mount in [('proc_root = "/host/proc"', "/host/proc"), ('dir = "/var/lib/oomlens/spool"', "/var/lib/oomlens"),
                              ("/var/lib/kubelet/pod-resources/kubelet.sock", "/var/lib/kubelet/pod-resources"),
                              ('"/var/log/pods/', "/var/log/pods"), ('path = "/dev/kmsg"', "/dev/kmsg"),
                              ("/etc/oomlens/tls/tls.crt", "/etc/oomlens/tls")]:
            self.assertIn(needle, cfg)
            self.assertIn(mount, mounts)
        port = self.agent["ports"][0]["containerPort"]
        self.assertIn(f'listen = "0.0.0.0:{port}"', cfg)
        self.assertEqual(self.agent["args"][-1], "/etc/oomlens/config/agent.toml")

    def test_probes_resources_and_security(self):
        collector = by_kind(self.docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual(collector["startupProbe"]["httpGet"]["path"], "/healthz")
        self.assertGreaterEqual(collector["startupProbe"]["failureThreshold"] * collector["startupProbe"]["periodSeconds"], 600)
        for name, c in [("agent", self.agent), ("collector", collector)]:
            with self.subTest(container=name):
                ports = {p["name"]: p for p in c["ports"]}
                for probe, path in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")]:
                    self.assertEqual(c[probe]["httpGet"]["path"], path)
                    self.assertEqual(ports[c[probe]["httpGet"]["port"]]["protocol"], "TCP")
                for k in ("cpu", "memory"):
                    self.assertIn(k, c["resources"]["requests"])
                self.assertIn("memory", c["resources"]["limits"])
                sc = c["securityContext"]
                self.assertFalse(sc["allowPrivilegeEscalation"])
                self.assertTrue(sc["readOnlyRootFilesystem"])
                self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
        # Privileged by default: the only way a container can open /dev/kmsg (Xid errors, host OOM
        # kills); values.yaml says so and `agent.privileged: false` is the hardened opt-out.
        self.assertIs(self.agent["securityContext"]["privileged"], lookup(values(), "agent.privileged"))
        self.assertTrue(self.agent["securityContext"]["privileged"])
        self.assertEqual(self.agent["securityContext"]["capabilities"].get("add"), ["SYSLOG"])

    def test_schema_migration_job_runs_before_upgrades(self):
        job = by_kind(self.docs, "Job", "oomlens-migrate")[0]
        ann = job["metadata"]["annotations"]
        self.assertEqual(ann["helm.sh/hook"], "pre-upgrade")
        self.assertEqual(ann["helm.sh/hook-delete-policy"], "before-hook-creation")
        self.assertGreaterEqual(job["spec"]["activeDeadlineSeconds"], 3 * 3600, "room for a rollup backfill")
        pod = job["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        self.assertEqual(c["args"][0], "migrate")
        dep = by_kind(self.docs, "Deployment", "oomlens-collector")[0]["spec"]["template"]["spec"]
        (collector,) = dep["containers"]
        # The same image, ClickHouse settings and credentials as the collectors it prepares.
        self.assertEqual((c["image"], c["env"]), (collector["image"], collector["env"]))
        self.assertEqual(c["args"][1:], collector["args"][1:])
        self.assertEqual(pod["securityContext"], dep["securityContext"])
        self.assertFalse(c["securityContext"]["allowPrivilegeEscalation"])

    def test_collector_service_pdb_and_tls(self):
        dep = by_kind(self.docs, "Deployment", "oomlens-collector")[0]
        pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        svc = by_kind(self.docs, "Service", "oomlens-collector")[0]
        quic = [p for p in svc["spec"]["ports"] if p["name"] == "quic"]
        self.assertEqual((quic[0]["protocol"], quic[0]["targetPort"]), ("UDP", "quic"))
        self.assertTrue(all(pod_labels.get(k) == v for k, v in svc["spec"]["selector"].items()))
        pdb = by_kind(self.docs, "PodDisruptionBudget", "oomlens-collector")[0]
        sel = pdb["spec"]["selector"]["matchLabels"]
        self.assertTrue(sel and all(pod_labels.get(k) == v for k, v in sel.items()), "the PDB selects the collector pods")
        self.assertLess(pdb["spec"]["minAvailable"], dep["spec"]["replicas"], "a PDB that blocks every eviction")
        pod = dep["spec"]["template"]["spec"]
        self.assertTrue(pod["securityContext"]["runAsNonRoot"])
        secret_vols = [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v]
        cert = by_kind(self.docs, "Certificate", "oomlens-collector")[0]["spec"]
        self.assertEqual(secret_vols, [cert["secretName"]])
        self.assertIn("server auth", cert["usages"])
        agent_cfg = by_kind(self.docs, "ConfigMap", "oomlens-agent")[0]["data"]["agent.toml"]
        server_name = re.search(r'server_name = "([^"]+)"', agent_cfg).group(1)
        self.assertIn(server_name, cert["dnsNames"], "agents must find uplink.server_name in the collector certificate")
        collectors = re.search(r"collectors = \[([^\]]+)\]", agent_cfg).group(1)
        self.assertIn(f'{svc["metadata"]["name"]}.{svc["metadata"]["namespace"]}.svc:{quic[0]["port"]}', collectors)
        env = {e["name"] for e in pod["containers"][0]["env"]}
        self.assertTrue({"OOMLENS_CLICKHOUSE_URL", "OOMLENS_CLICKHOUSE_USER", "OOMLENS_CLICKHOUSE_PASSWORD"} <= env)

    def test_agent_certificates_name_their_node(self):
        nodes = values()["certificates"]["agentNodes"]
        certs = [d for d in by_kind(self.docs, "Certificate") if d["metadata"]["name"].startswith("oomlens-agent-")]
        self.assertEqual([c["spec"]["commonName"] for c in certs], nodes)
        for c in certs:
            self.assertEqual(c["spec"]["usages"], ["client auth", "digital signature"])
            self.assertEqual(c["spec"]["secretName"], "oomlens-agent-" + c["spec"]["commonName"])
        cluster = values()["certificates"]["cluster"]
        self.assertTrue(all(c["spec"]["subject"]["organizationalUnits"] == [cluster] for c in certs))
        self.assertIn(f'cluster = "{cluster}"', by_kind(self.docs, "ConfigMap", "oomlens-agent")[0]["data"]["agent.toml"])
        self.assertIn(f'allowed_clusters = ["{cluster}"]', by_kind(self.docs, "ConfigMap", "oomlens-collector")[0]["data"]["collector.toml"])


class RealBinaries(unittest.TestCase):
    def print_config(self, binary, text, env=None):
        with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
            f.write(text)
            f.flush()
            r = subprocess.run([binary, "print-config", "--config", f.name], capture_output=True, text=True,
                               env={**os.environ, **(env or {})}, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_agent_config_is_accepted(self):
        docs = load_manifests()
        text = by_kind(docs, "ConfigMap", "oomlens-agent")[0]["data"]["agent.toml"]
        out = self.print_config(ARGS.agent_bin, text, {"OOMLENS_NODE": "gpu-node-01"})
        self.assertIn('node = "gpu-node-01"', out)
        self.assertIn('proc_root = "/host/proc"', out)
        self.assertIn("[pod_resources]", out)
        # The check can fail: a misspelt key is refused.
        with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
            f.write(text.replace("proc_root", "proc_rot"))
            f.flush()
            r = subprocess.run([ARGS.agent_bin, "print-config", "--config", f.name], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("proc_rot", r.stderr)

    def test_collector_config_is_accepted(self):
        text = by_kind(load_manifests(), "ConfigMap", "oomlens-collector")[0]["data"]["collector.toml"]
        dep = by_kind(load_manifests(), "Deployment", "oomlens-collector")[0]
        container = dep["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value", "from-secret") for e in container["env"]}
        out = self.print_config(ARGS.collector_bin, text, env)
        self.assertIn("max_memory_bytes = 1610612736", out)
        # The Deployment's environment reaches the configuration.
        self.assertIn(f'url = "{env["OOMLENS_CLICKHOUSE_URL"]}"', out)
        self.assertIn(f'database = "{env["OOMLENS_CLICKHOUSE_DATABASE"]}"', out)
        self.assertIn('user = "from-secret"', out)
        self.assertNotIn('password = "from-secret"', out, "the password is redacted")

    def test_alert_values_render_an_accepted_alerts_section(self):
        alerts = {
            "alertmanagerUrls": ["http://am-0.monitoring:9093", "http://am-1.monitoring:9093"],
            "webhooks": [{"url": "env:OOMLENS_SLACK_WEBHOOK_URL", "format": "slack"}, {"url": "https://hooks.example/oom"}],
            "scenarios": ["batch", "contention"],
            "envFromSecret": "oomlens-alert-secrets",
        }
        docs = render.render_chart({"collector": {"alerts": alerts}})
        container = by_kind(docs, "Deployment", "oomlens-collector")[0]["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual(container["envFrom"], [{"secretRef": {"name": "oomlens-alert-secrets"}}])
        self.assertNotIn("envFrom", by_kind(load_manifests(), "Deployment", "oomlens-collector")[0]["spec"]["template"]
                         ["spec"]["containers"][0], "no Secret by default")
        text = by_kind(docs, "ConfigMap", "oomlens-collector")[0]["data"]["collector.toml"]
        out = self.print_config(ARGS.collector_bin, text)
        self.assertIn('alertmanager_urls = [\n    "http://am-0.monitoring:9093",\n    "http://am-1.monitoring:9093",\n]', out)
        self.assertIn('url = "env:OOMLENS_SLACK_WEBHOOK_URL"\nformat = "slack"', out)
        self.assertIn('format = "json"', out)
        self.assertIn('scenarios = [\n    "batch",\n    "contention",\n]', out)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent-bin", required=True)
    ap.add_argument("--collector-bin", required=True)
    ARGS, rest = ap.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
