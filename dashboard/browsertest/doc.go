// Package browsertest drives the dashboard in a real headless Chromium
// against the real database and broker. It is a module of its own so that
// chromedp never enters the core module's requirements; run it with
// `make test-browser`, which installs Chromium (scripts/chromium.sh) first.
package browsertest
