package level2

import (
	"bytes"
	"strings"
	"testing"

	"mcpintercept/integrity"
	"mcpintercept/mcp"
)

// FuzzListFilter: whatever a server answers to a list request, the filter never panics, its
// output is a message the strict decoder accepts with the same id, it holds exactly the entries
// not hidden (none of them hidden ones), and a page with nothing to hide is forwarded byte for
// byte.
func FuzzListFilter(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo"},{"name":"denied_x"}],"nextCursor":"c"}}`), uint8(0))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"a","result":{"tools":[{"name":"denied_a"}],"ttlMs":5,"cacheScope":"public"}}`), uint8(0))
	f.Add([]byte(`{"jsonrpc":"2.0","id":2,"result":{"resources":[{"uri":"file:///denied_x"},{"uri":"x","name":"denied_y"}]}}`), uint8(2))
	f.Add([]byte(`{"jsonrpc":"2.0","id":3,"result":{"tools":[],"prompts":[{"name":"denied_\u0070"},{}],"resourceTemplates":[1,"x",null]}}`), uint8(4))
	f.Add([]byte(`{"jsonrpc":"2.0","id":4,"result":{ "tools" : [ {"name":"denied_z"} , {"name":"ok"} ] }}`), uint8(1))
	f.Fuzz(func(t *testing.T, raw []byte, sel uint8) {
		if len(raw) > 1<<16 {
			return
		}
		msgs, batch, err := mcp.Decode(raw, mcp.DecodeOptions{})
		if err != nil || batch || msgs[0].Kind != mcp.KindResponse {
			return
		}
		methods := []string{"tools/list", "prompts/list", "resources/list", "resources/templates/list", "server/discover"}
		kinds := listMethods[methods[int(sel)%len(methods)]]
		var judged []integrity.Def // the definitions filterList asked about, in order
		hide := func(k *listKind, name string) (bool, string) {
			if k.def != "" {
				judged = append(judged, integrity.Def{Kind: k.def, Name: name})
			}
			return !strings.HasPrefix(name, "denied_"), "r"
		}
		fl := filterList(msgs[0].Raw, kinds, sel&8 != 0, hide)
		// Tool integrity's verdicts are matched to entries by this order: listDefs must list
		// exactly the definitions filterList judges, in the same order.
		defs := listDefs(msgs[0].Raw, kinds)
		if len(defs) != len(judged) {
			t.Fatalf("listDefs found %d definitions, filterList judged %d", len(defs), len(judged))
		}
		for i := range defs {
			if defs[i].Kind != judged[i].Kind || defs[i].Name != judged[i].Name {
				t.Fatalf("definition %d: listDefs %s %q, filterList %s %q", i, defs[i].Kind, defs[i].Name, judged[i].Kind, judged[i].Name)
			}
			key := "name"
			if defs[i].Kind == integrity.KindTemplate {
				key = "uriTemplate"
			}
			if n, ok := mcp.StringMember(defs[i].Raw, key); !ok || n != defs[i].Name {
				t.Fatalf("definition %d: Raw does not name %q: %s", i, defs[i].Name, defs[i].Raw)
			}
		}
		judged = nil
		if len(fl.hidden) == 0 {
			if !bytes.Equal(fl.out, msgs[0].Raw) {
				t.Fatalf("nothing hidden, yet the message changed:\n%s\n%s", msgs[0].Raw, fl.out)
			}
			return
		}
		out, _, err := mcp.Decode(fl.out, mcp.DecodeOptions{})
		if err != nil {
			t.Fatalf("filtered message does not decode: %v\n%s\nfrom\n%s", err, fl.out, msgs[0].Raw)
		}
		if !bytes.Equal(out[0].ID, msgs[0].ID) {
			t.Fatalf("id changed: %s -> %s", msgs[0].ID, out[0].ID)
		}
		again := filterList(fl.out, kinds, sel&8 != 0, hide)
		if len(again.hidden) != 0 || again.total != fl.total-len(fl.hidden) {
			t.Fatalf("filtered output still hides %v (total %d, was %d - %d)", again.hidden, again.total, fl.total, len(fl.hidden))
		}
		if scope, ok := mcp.StringMember(out[0].Result, "cacheScope"); ok && scope != "private" {
			t.Fatalf("filtered page has cacheScope %q", scope)
		}
	})
}
