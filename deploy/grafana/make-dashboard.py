#!/usr/bin/env python3
"""Writes router-dashboard.json (Grafana 9+ dashboard for the router pair and the port
proxies) from the panel list below, so the JSON stays reviewable as code. Run it after
changing a panel: python3 deploy/grafana/make-dashboard.py"""
import json
import os

ROWS = [
    ("Traffic", [
        ("Requests per second by class", "sum by (class) (rate(router_http_requests_total[1m]))", "reqps"),
        ("5xx ratio", "sum(rate(router_http_requests_total{class=\"5xx\"}[5m])) / sum(rate(router_http_requests_total[5m]))", "percentunit"),
        ("Latency p50 / p99", [
            "histogram_quantile(0.5, sum by (le) (rate(router_http_request_duration_seconds_bucket[5m])))",
            "histogram_quantile(0.99, sum by (le) (rate(router_http_request_duration_seconds_bucket[5m])))"], "s"),
        ("Open client connections", "sum by (instance, listener) (router_open_connections)", "short"),
        ("New client connections per second", "sum by (listener) (rate(router_connections_total[1m]))", "short"),
        ("Client connections per worker thread", "sum by (instance, worker) (router_worker_connections)", "short"),
    ]),
    ("Per app (top apps, then the app chosen above)", [
        ("Top 10 apps by requests per second", "topk(10, sum by (app) (rate(router_app_requests_total{app!=\"_other\"}[5m])))", "reqps"),
        ("Top 10 apps by 5xx ratio", "topk(10, sum by (app) (rate(router_app_requests_total{class=\"5xx\", app!=\"_other\"}[5m])) / sum by (app) (rate(router_app_requests_total{app!=\"_other\"}[5m])))", "percentunit"),
        ("Top 10 apps by p99 response time", "topk(10, histogram_quantile(0.99, sum by (app, le) (rate(router_app_request_duration_seconds_bucket{app!=\"_other\"}[5m]))))", "s"),
        ("$app: requests per second by class", "sum by (class) (rate(router_app_requests_total{app=~\"$app\"}[1m]))", "reqps"),
        ("$app: response time p50 / p99", [
            "histogram_quantile(0.5, sum by (le) (rate(router_app_request_duration_seconds_bucket{app=~\"$app\"}[5m])))",
            "histogram_quantile(0.99, sum by (le) (rate(router_app_request_duration_seconds_bucket{app=~\"$app\"}[5m])))"], "s"),
        ("$app: bytes in / out per second", [
            "sum(rate(router_app_received_bytes_total{app=~\"$app\"}[1m]))",
            "sum(rate(router_app_sent_bytes_total{app=~\"$app\"}[1m]))"], "Bps"),
        ("$app: upstream errors per second", "sum(rate(router_app_upstream_errors_total{app=~\"$app\"}[5m]))", "short"),
        ("Share of requests in app=\"_other\" (apps past metrics.max_apps)", "sum(rate(router_app_requests_total{app=\"_other\"}[5m])) / sum(rate(router_app_requests_total[5m]))", "percentunit"),
    ]),
    ("Members", [
        ("Members up / down", ["sum(router_backend_up)", "count(router_backend_up == 0)"], "short"),
        ("Upstream errors by kind", "sum by (kind) (rate(router_upstream_errors_total[5m]))", "short"),
        ("Retries and queue waits", ["sum(rate(router_upstream_retries_total[5m]))", "sum(rate(router_upstream_queue_waits_total[5m]))"], "short"),
        ("Ejections and recoveries", ["sum by (reason) (rate(router_backend_ejections_total[5m]))", "sum(rate(router_backend_recoveries_total[5m]))"], "short"),
        ("Health checks by result", "sum by (result) (rate(router_health_checks_total[5m]))", "short"),
        ("Health check p99", "histogram_quantile(0.99, sum by (le) (rate(router_health_check_duration_seconds_bucket[5m])))", "s"),
        ("Member connections opened per second", "sum(rate(router_upstream_connections_opened_total[1m]))", "short"),
    ]),
    ("TLS", [
        ("Handshakes by kind", "sum by (kind) (rate(router_tls_handshakes_total[1m]))", "short"),
        ("Handshake failures by reason", "sum by (reason) (rate(router_tls_handshake_failures_total[5m]))", "short"),
        ("Certificates in service", "max(router_tls_certificates)", "short"),
        ("Days to certificate expiry (lowest 10)", "bottomk(10, (min by (alias) (router_tls_certificate_expiry_timestamp_seconds) - time()) / 86400)", "d"),
    ]),
    ("Routing events", [
        ("Events by outcome", "sum by (outcome) (rate(spi_events_total[5m]))", "short"),
        ("Dead letters and persist failures", ["sum(increase(spi_dead_letters_total[1h]))", "sum(increase(spi_persist_failures_total[1h]))"], "short"),
        ("Broker connected", "spi_broker_connected", "short"),
        ("Broker reconnects", "sum by (instance) (increase(spi_broker_reconnects_total[1h]))", "short"),
        ("Seconds since the last event", "time() - spi_last_event_timestamp_seconds", "s"),
        ("Propagation p99 (received to live)", "histogram_quantile(0.99, sum by (le) (rate(spi_route_propagation_seconds_bucket[5m])))", "s"),
        ("Routes and apps", ["max(router_routes)", "max(router_apps)"], "short"),
        ("Table updates per second", "sum(rate(router_table_updates_total[5m]))", "short"),
    ]),
    ("VIP (keepalived)", [
        ("VIP holder (1 = master)", "router_vrrp_master", "short"),
        ("VRRP transitions (15 min)", "increase(router_vrrp_transitions_total[15m])", "short"),
    ]),
    ("Port proxies", [
        ("Open relayed connections by mode", "sum by (instance, mode) (portproxy_connections_open)", "short"),
        ("Bytes per second by direction", "sum by (direction) (rate(portproxy_bytes_total[1m]))", "Bps"),
        ("Connect failures and rejects", ["sum by (mode) (rate(portproxy_connect_failures_total[5m]))", "sum by (reason) (rate(portproxy_rejected_total[5m]))"], "short"),
        ("Peer answers (cluster)", "sum by (answer) (rate(portproxy_cluster_peer_answers_total[5m]))", "short"),
        ("PROXY-protocol rejects", "sum by (reason) (rate(portproxy_proxy_protocol_rejects_total[5m]))", "short"),
        ("Reloads and reload errors", ["sum by (file) (increase(portproxy_reloads_total[1h]))", "sum by (file) (increase(portproxy_reload_errors_total[1h]))"], "short"),
        ("Listeners and mappings", ["sum by (mode) (portproxy_listeners)", "sum by (mode) (portproxy_mappings)"], "short"),
    ]),
]


def main():
    panels, pid, y = [], 1, 0
    for title, items in ROWS:
        panels.append({"type": "row", "title": title, "id": pid, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        pid += 1
        y += 1
        for i, (ptitle, exprs, unit) in enumerate(items):
            exprs = exprs if isinstance(exprs, list) else [exprs]
            panels.append({
                "type": "timeseries", "title": ptitle, "id": pid,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 8, "x": (i % 3) * 8, "y": y + (i // 3) * 8},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [{"refId": chr(65 + k), "expr": e, "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                            for k, e in enumerate(exprs)],
            })
            pid += 1
        y += ((len(items) + 2) // 3) * 8
    dash = {
        "title": "Router pair and port proxies", "uid": "router-pair", "schemaVersion": 38,
        "version": 1, "editable": True, "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
        "tags": ["router", "haproxy-replacement", "openshift"],
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus",
             "label": "Prometheus", "current": {}},
            {"name": "app", "type": "query", "label": "App",
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": {"query": "label_values(router_app_requests_total, app)", "refId": "apps"},
             "definition": "label_values(router_app_requests_total, app)",
             "refresh": 2, "sort": 1, "multi": False, "includeAll": False, "current": {}},
        ]},
        "panels": panels,
    }
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "router-dashboard.json")
    with open(out, "w") as f:
        json.dump(dash, f, indent=2)
        f.write("\n")
    print(out)


if __name__ == "__main__":
    main()
