// Command trace is scripts/walk.sh's probe (the default; bpftrace is the other): it puts one
// uprobe_multi link (Linux ≥ 6.6) on the entry of every function of the module in a walk test
// binary, runs the binary, and prints what the probe counted between the harness's Begin and
// End in bpftrace's map format, which scripts/walk/count reads:
//
//	@c[callee address, return address at [SP], return address at [BP+8]]: count
//
// One link attaches and detaches thousands of probes in one system call each way, where
// bpftrace 0.17 opens one perf event per function (minutes for ~1,600 functions).
//
// Usage: trace -bin BIN [-module M] [-exclude PREFIX] -- BIN args...
//
// It exits 3 when the probes cannot be set up (no uprobe_multi: Linux < 6.6), 1 when the run fails.
package main

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
)

// x86-64 struct pt_regs offsets.
const (
	regBP = 4 * 8
	regIP = 16 * 8
	regSP = 19 * 8
)

// Cookies of the two markers; every other probe has 0.
const (
	cookieBegin = 1
	cookieEnd   = 2
)

func main() {
	bin := flag.String("bin", "", "the walk test binary")
	module := flag.String("module", "mcpintercept", "probe the functions of this module")
	exclude := flag.String("exclude", "mcpintercept/scripts/walk/", "but not of these packages (the harness)")
	markers := flag.String("markers", "mcpintercept/scripts/walk/harness.", "the package of Begin and End")
	maxKeys := flag.Int("max-keys", 1<<18, "size of the count map")
	flag.Parse()
	if *bin == "" || flag.NArg() == 0 {
		fail(errors.New("usage: trace -bin BIN -- BIN args..."))
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		setupFailed(err)
	}

	syms, cookies, err := symbols(*bin, *module+"/", *exclude, *markers)
	if err != nil {
		setupFailed(err)
	}
	on, err := ebpf.NewMap(&ebpf.MapSpec{Name: "walk_on", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		setupFailed(err)
	}
	defer on.Close()
	counts, err := ebpf.NewMap(&ebpf.MapSpec{Name: "walk_c", Type: ebpf.Hash, KeySize: 24, ValueSize: 8, MaxEntries: uint32(*maxKeys)})
	if err != nil {
		setupFailed(err)
	}
	defer counts.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "walk_entry", Type: ebpf.Kprobe, AttachType: ebpf.AttachTraceUprobeMulti,
		License: "GPL", Instructions: program(on.FD(), counts.FD()),
	})
	if err != nil {
		setupFailed(fmt.Errorf("load: %w", err))
	}
	defer prog.Close()
	ex, err := link.OpenExecutable(*bin)
	if err != nil {
		setupFailed(err)
	}
	l, err := ex.UprobeMulti(syms, prog, &link.UprobeMultiOptions{Cookies: cookies})
	if err != nil {
		setupFailed(fmt.Errorf("uprobe_multi on %d functions: %w", len(syms), err))
	}
	fmt.Printf("Attaching %d probes...\n", len(syms))

	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	runErr := cmd.Run()
	l.Close()

	var key [24]byte
	var val uint64
	n := 0
	it := counts.Iterate()
	for it.Next(&key, &val) {
		fmt.Printf("@c[%d, %d, %d]: %d\n", binary.LittleEndian.Uint64(key[0:]), binary.LittleEndian.Uint64(key[8:]),
			binary.LittleEndian.Uint64(key[16:]), val)
		n++
	}
	if err := it.Err(); err != nil {
		fail(err)
	}
	if n >= *maxKeys {
		fmt.Fprintf(os.Stderr, "trace: the count map is full (%d keys): raise -max-keys\n", n)
	}
	if runErr != nil {
		fail(runErr)
	}
}

// setupFailed exits 3: the probes could not be set up (walk.sh then tries bpftrace).
func setupFailed(err error) {
	fmt.Fprintln(os.Stderr, "walk trace:", err)
	os.Exit(3)
}

// symbols are the functions to probe: the module's (not the excluded packages'), and the two
// markers with their cookies.
func symbols(bin, prefix, exclude, markers string) ([]string, []uint64, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	all, err := f.Symbols()
	if err != nil {
		return nil, nil, err
	}
	var syms []string
	var cookies []uint64
	seen := map[string]bool{}
	for _, s := range all {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || s.Section == elf.SHN_UNDEF || seen[s.Name] {
			continue
		}
		var c uint64
		switch {
		case s.Name == markers+"Begin":
			c = cookieBegin
		case s.Name == markers+"End":
			c = cookieEnd
		case !strings.HasPrefix(s.Name, prefix) || strings.HasPrefix(s.Name, exclude):
			continue
		}
		seen[s.Name] = true
		syms = append(syms, s.Name)
		cookies = append(cookies, c)
	}
	if !seen[markers+"Begin"] || !seen[markers+"End"] {
		return nil, nil, fmt.Errorf("%s: no %sBegin/End", bin, markers)
	}
	return syms, cookies, nil
}

// program counts one entry: a marker sets or clears walk_on[0]; any other function, while
// walk_on[0] is set, adds 1 to walk_c[ip, *(sp), *(bp+8)].
func program(on, counts int) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnGetAttachCookie.Call(),
		asm.JEq.Imm(asm.R0, 0, "probe"),
		// A marker: walk_on[0] = (cookie == Begin).
		asm.Mov.Imm(asm.R1, 0),
		asm.JNE.Imm(asm.R0, cookieBegin, "set"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreMem(asm.RFP, -16, asm.R1, asm.DWord).WithSymbol("set"),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, on),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -16),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnMapUpdateElem.Call(),
		asm.Ja.Label("exit"),

		asm.StoreImm(asm.RFP, -4, 0, asm.Word).WithSymbol("probe"),
		asm.LoadMapPtr(asm.R1, on),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.JEq.Imm(asm.R1, 0, "exit"),
		// key = {ip, *(sp), *(bp+8)} at fp-24.
		asm.LoadMem(asm.R1, asm.R6, regIP, asm.DWord),
		asm.StoreMem(asm.RFP, -24, asm.R1, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, -16),
		asm.Mov.Imm(asm.R2, 8),
		asm.LoadMem(asm.R3, asm.R6, regSP, asm.DWord),
		asm.FnProbeReadUser.Call(),
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, -8),
		asm.Mov.Imm(asm.R2, 8),
		asm.LoadMem(asm.R3, asm.R6, regBP, asm.DWord),
		asm.Add.Imm(asm.R3, 8),
		asm.FnProbeReadUser.Call(),
		// walk_c[key] += 1, inserting 1 when absent (another CPU may insert first: add then).
		asm.Mov.Imm(asm.R7, 2),
		asm.LoadMapPtr(asm.R1, counts).WithSymbol("again"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -24),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "insert"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Ja.Label("exit"),
		asm.Mov.Imm(asm.R1, 1).WithSymbol("insert"),
		asm.StoreMem(asm.RFP, -32, asm.R1, asm.DWord),
		asm.LoadMapPtr(asm.R1, counts),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -24),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -32),
		asm.Mov.Imm(asm.R4, 1), // BPF_NOEXIST
		asm.FnMapUpdateElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.Sub.Imm(asm.R7, 1),
		asm.JNE.Imm(asm.R7, 0, "again"),

		asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
		asm.Return(),
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "walk trace:", err)
	os.Exit(1)
}
