package main

import "strings"

// A check is one row of the compatibility table: the existing tests that
// show a capability on the real API server, run against each release's
// control plane. Tests are "TestName" or "TestName/Subtest", each in the
// package pkg of the module in dir (relative to the repository).
type check struct {
	// Name is the row's name in the table.
	Name string `json:"name"`
	// Tests show the capability where the release has what it needs.
	Tests []testRef `json:"tests"`
	// Needs is a feature the release must serve for Tests to apply ("" for
	// none); where it does not, Instead runs: tests that show tripswitch
	// says so, and nothing else breaks.
	Needs   feature   `json:"needs,omitempty"`
	Instead []testRef `json:"instead,omitempty"`
}

// testRef names a test in a package of a module.
type testRef struct {
	Dir  string `json:"dir"`
	Pkg  string `json:"pkg"`
	Test string `json:"test"`
}

// feature is something a release may lack, found by discovery.
type feature string

// mutatingAdmissionPolicy: MutatingAdmissionPolicy at admissionregistration.k8s.io/v1.
const mutatingAdmissionPolicy feature = "MutatingAdmissionPolicy at admissionregistration.k8s.io/v1"

func root(pkg, test string) testRef    { return testRef{Dir: ".", Pkg: pkg, Test: test} }
func testMod(pkg, test string) testRef { return testRef{Dir: "test", Pkg: pkg, Test: test} }
func (r testRef) top() string          { top, _, _ := strings.Cut(r.Test, "/"); return top }
func (r testRef) key() string          { return r.Dir + " " + r.Pkg }
func (r testRef) covers(name string) bool {
	return name == r.Test || strings.HasPrefix(name, r.Test+"/")
}

// checks are the rows, in the order of issue 56's list. Each names tests
// that already exist; the suite runs them, it does not copy them.
var checks = []check{
	{Name: "CRD installs, with its validation rules and defaults", Tests: []testRef{
		root("./internal/controller", "TestAPIServerRejectsBadBreakers"),
		root("./internal/controller", "TestAPIServerExplainsMalformedDurations"),
		root("./internal/controller", "TestAPIServerAppliesSeedDefaults"),
	}},
	{Name: "RBAC (chart and kustomize) and the admission guard on tripswitch's own writes", Tests: []testRef{
		testMod("./deploy", "TestInstalledPermissions"),
		root("./internal/controller", "TestGeneratedRoleSufficesWithResourceNames"),
	}},
	{Name: "Open and close with Ignore and Bypass, byte-identical", Tests: []testRef{
		root("./internal/controller", "TestFullCycle"),
	}},
	{Name: "Half-open trial judged on the API server's calls", Tests: []testRef{
		testMod("./e2e", "TestBypassTrialJudgedOnRealCalls"),
	}},
	{Name: "Floor: ValidatingAdmissionPolicy", Tests: []testRef{
		root("./internal/floor", "TestFloorOnTheAPIServer/ValidatingAdmissionPolicy"),
		root("./internal/controller", "TestFallbackFloorThroughACycle/ValidatingAdmissionPolicy"),
	}},
	{Name: "Floor: MutatingAdmissionPolicy", Needs: mutatingAdmissionPolicy, Tests: []testRef{
		root("./internal/floor", "TestFloorOnTheAPIServer/MutatingAdmissionPolicy"),
		root("./internal/controller", "TestFallbackFloorThroughACycle/MutatingAdmissionPolicy"),
	}, Instead: []testRef{
		root("./internal/floor", "TestFloorOnTheAPIServer/MutatingAdmissionPolicy"),
		testMod("./versions", "TestFallbackKindNotServedIsSaid"),
	}},
	{Name: "Owner patterns of docs/owners.md", Tests: []testRef{
		// The table of docs/owners.md: what each owner's write leaves of an
		// open, which is the API server's merge.
		root("./internal/owners", "TestWhatEachOwnerPatternLeaves"),
		root("./internal/controller", "TestOwnersThroughAnOutage"),
	}},
	{Name: "A lagging watch never takes back an open (resource versions compared)", Tests: []testRef{
		root("./internal/controller", "TestALaggingWatchNeverTakesBackAnOpen"),
	}},
}
