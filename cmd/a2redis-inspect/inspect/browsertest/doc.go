// Package browsertest drives the a2redis-inspect dashboard (serve) in a real
// headless Chromium with chromedp. It is a module of its own so that
// chromedp stays out of what the library's importers download; the
// Makefile's test target runs it. With CI=true a missing Chromium is a
// failure; otherwise the tests skip without one.
//
// TestScreenshots (run by make screenshots, with A2REDIS_SCREENSHOTS set to
// a directory) fills a demo prefix and writes dashboard-overview.png and
// dashboard-session.png there.
package browsertest
