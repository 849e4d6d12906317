// ignition-tools: the official Butane translator and Ignition validator of
// github.com/coreos/ignition/v2 (pinned in go.mod) behind one small stdin/stdout program, so the
// TypeScript manager and boot server can use them without a butane CLI on PATH.
//
//	ignition-tools translate   stdin: Butane YAML (any variant/version the module registers)
//	ignition-tools validate    stdin: Ignition JSON (any spec version 3.x the module parses)
//	ignition-tools version
//
// stdout is one JSON object:
//
//	{"ok": bool, "config": <Ignition JSON, translate only, when ok>, "error": "...",
//	 "report": [{"kind": "error|warning|info", "message": "...", "path": "$.systemd.units.0", "line": 3, "column": 5}]}
//
// Semantics are upstream's: translation warnings do not fail (ok stays true), a report with an
// error or a translation error does. The exit status is 0 whenever the JSON was written; it is
// non-zero only when stdin could not be read.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	butane "github.com/coreos/ignition/v2/butane/config"
	"github.com/coreos/ignition/v2/butane/config/common"
	exp "github.com/coreos/ignition/v2/config/v3_7_experimental"
	"github.com/coreos/vcontext/report"
)

// version of github.com/coreos/ignition/v2 this program is built against (kept equal to go.mod).
const moduleVersion = "v2.27.0"

type entry struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Path    string `json:"path,omitempty"`
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
}

type result struct {
	OK      bool            `json:"ok"`
	Config  json.RawMessage `json:"config,omitempty"`
	Error   string          `json:"error,omitempty"`
	Report  []entry         `json:"report"`
	Version string          `json:"version"`
}

func entries(r report.Report) []entry {
	out := []entry{}
	for _, e := range r.Entries {
		x := entry{Kind: kind(e.Kind), Message: e.Message}
		if len(e.Context.Path) > 0 {
			x.Path = e.Context.String()
		}
		if e.Marker.StartP != nil {
			x.Line, x.Column = int(e.Marker.StartP.Line), int(e.Marker.StartP.Column)
		}
		out = append(out, x)
	}
	return out
}

func kind(k report.EntryKind) string {
	switch k {
	case report.Error:
		return "error"
	case report.Warn:
		return "warning"
	case report.Info:
		return "info"
	}
	return k.String()
}

func translate(in []byte) result {
	out, rpt, err := butane.TranslateBytes(in, common.TranslateBytesOptions{Raw: true})
	res := result{Report: entries(rpt), Version: moduleVersion}
	if err != nil {
		res.Error = err.Error()
		return res
	}
	if rpt.IsFatal() {
		res.Error = "translation reported errors"
		return res
	}
	// Translated output is validated like any stored config before anyone serves it.
	_, vrpt, verr := exp.ParseCompatibleVersion(out)
	res.Report = append(res.Report, entries(vrpt)...)
	if verr != nil {
		res.Error = verr.Error()
		return res
	}
	res.OK, res.Config = true, out
	return res
}

func validate(in []byte) result {
	_, rpt, err := exp.ParseCompatibleVersion(in)
	res := result{Report: entries(rpt), Version: moduleVersion}
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.OK = !rpt.IsFatal()
	if !res.OK {
		res.Error = "validation reported errors"
	}
	return res
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: ignition-tools translate|validate|version < input")
		os.Exit(2)
	}
	var res result
	switch os.Args[1] {
	case "version":
		fmt.Println(moduleVersion)
		return
	case "translate", "validate":
		in, err := io.ReadAll(os.Stdin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "reading stdin:", err)
			os.Exit(1)
		}
		if os.Args[1] == "translate" {
			res = translate(in)
		} else {
			res = validate(in)
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		os.Exit(1)
	}
}
