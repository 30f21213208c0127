module github.com/a2redis/a2redis/cmd/a2redis-inspect/inspect/browsertest

go 1.26.8

require (
	github.com/a2redis/a2redis v0.0.0
	github.com/chromedp/chromedp v0.23.1
	github.com/redis/rueidis v1.0.80
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/alicebob/miniredis/v2 v2.40.0 // indirect
	github.com/chromedp/cdproto v0.160.1 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

replace github.com/a2redis/a2redis => ../../../..
