// Package docs holds no code: its directory is the operator documentation
// of mcpaudit, and its tests check the documentation against the code
// without building or starting anything. Every HTTP route the code
// registers is documented (TestRoutesDocumented). The other references are
// checked beside what they document: the configuration keys by
// cmd/mcpaudit's TestConfigReference (docs/config.md is generated), the
// metrics by exporter/metrics' TestDocs and TestRelayDocs, and the alerts'
// runbook sections by rules' TestAlertsComplete. Every section of docs/ the code
// names (docs/detection.md#time) exists (TestCodeDocLinks), and every relative
// link of the README, docs/ and deploy/'s READMEs resolves (TestMarkdownLinks).
package docs
