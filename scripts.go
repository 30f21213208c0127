package a2redis

import (
	"embed"
	"io/fs"

	"github.com/a2redis/a2redis/internal/scripts"
)

// lua/include/layout.lua is generated from package keys (layout_test.go).
//go:generate go test -run TestLayoutInclude -update .

// luaFiles is the lua/ folder: the scripts, and their includes in
// lua/include/. Only this package can embed it (a go:embed pattern cannot
// name a parent directory), so it hands the folder to internal/scripts,
// which composes them, before any package importing this one runs.
//
//go:embed lua/*.lua lua/include/*.lua
var luaFiles embed.FS

func init() {
	sub, err := fs.Sub(luaFiles, "lua")
	if err != nil {
		panic(err)
	}
	scripts.SetSource(sub)
}
