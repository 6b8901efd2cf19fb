// Command celcost times the API server's own evaluation of the generated final-state policies
// (`rdma-webhook policy admission-policy`) on pods, in process: the match conditions, the
// validations and the message expressions of each ValidatingAdmissionPolicy, compiled and run by
// k8s.io/apiserver's validating-admission-policy code of the release the e2e suite runs (1.37),
// against typed v1 Pods, as kube-apiserver evaluates them (a fresh VersionedAttributes per
// evaluation, so the lazy CEL value of the object is built each time).
//
// Why: the policy mode's cost behind a real API server (benchmarks/e2e_final_state.py) is a few
// tenths of a millisecond inside the noise of a whole pod CREATE; this isolates the CEL part so a
// change to the generated expressions can be measured before and after in one run.
//
//	go run . -policies A.yaml[,B.yaml...] -pods pods.json [-n 20000] [-rounds 5]
//
// pods.json: a JSON list of v1 Pods (the API server's defaulted form). Output: one JSON object
// per (policy file, pod), with ns per evaluation (median of rounds) and whether it was admitted.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
)

type compiled struct {
	name      string
	validator validating.Validator
}

// compile builds a policy's validator the way the validating plugin of k8s.io/apiserver does
// (its compilePolicy is unexported): one composited compiler holding the variables, then the
// match conditions, validations, audit annotations and message expressions.
func compile(p *admissionregistrationv1.ValidatingAdmissionPolicy) (compiled, error) {
	vars := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil, HasAuthorizer: true}
	msgVars := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil, HasAuthorizer: false}
	c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return compiled{}, err
	}
	named := make([]plugincel.NamedExpressionAccessor, len(p.Spec.Variables))
	for i, v := range p.Spec.Variables {
		named[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	c.CompileAndStoreVariables(named, vars, environment.StoredExpressions)
	var matcher matchconditions.Matcher
	if len(p.Spec.MatchConditions) > 0 {
		acc := make([]plugincel.ExpressionAccessor, len(p.Spec.MatchConditions))
		for i := range p.Spec.MatchConditions {
			acc[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
		}
		matcher = matchconditions.NewMatcher(c.CompileCondition(acc, vars, environment.StoredExpressions), p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}
	validations := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	audit := make([]plugincel.ExpressionAccessor, 0)
	val := validating.NewValidator(c.CompileCondition(validations, vars, environment.StoredExpressions), matcher,
		c.CompileCondition(audit, vars, environment.StoredExpressions),
		c.CompileCondition(messages, msgVars, environment.StoredExpressions), p.Spec.FailurePolicy, nil)
	return compiled{name: p.Name, validator: val}, nil
}

func readPolicies(path string) ([]*admissionregistrationv1.ValidatingAdmissionPolicy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*admissionregistrationv1.ValidatingAdmissionPolicy
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			if err.Error() == "EOF" {
				return out, nil
			}
			return nil, err
		}
		if raw["kind"] != "ValidatingAdmissionPolicy" {
			continue
		}
		b, _ := json.Marshal(raw)
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		if err := json.Unmarshal(b, p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
}

var podGVK = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
var podGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

func attrs(pod *corev1.Pod) *admission.VersionedAttributes {
	rec := admission.NewAttributesRecord(pod, nil, podGVK, pod.Namespace, pod.Name, podGVR, "", admission.Create,
		&metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "admin"})
	return &admission.VersionedAttributes{Attributes: rec, VersionedObject: admission.NewLazyObject(pod), VersionedKind: podGVK}
}

// allowed: no validation failed (a policy whose match condition is false admits).
func allowed(r validating.ValidateResult) bool {
	for _, d := range r.Decisions {
		if d.Action == validating.ActionDeny {
			return false
		}
	}
	return true
}

func main() {
	policies := flag.String("policies", "", "comma-separated policy files")
	podsFile := flag.String("pods", "", "JSON list of v1 Pods")
	n := flag.Int("n", 20000, "evaluations per round")
	rounds := flag.Int("rounds", 5, "rounds (median reported)")
	profile := flag.String("cpuprofile", "", "write a CPU profile here")
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	raw, err := os.ReadFile(*podsFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var pods []*corev1.Pod
	if err := json.Unmarshal(raw, &pods); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}
	ctx := context.Background()
	files := strings.Split(*policies, ",")
	sets := make([][]compiled, len(files))
	for f, file := range files {
		ps, err := readPolicies(file)
		if err != nil || len(ps) == 0 {
			fmt.Fprintln(os.Stderr, file, err, len(ps))
			os.Exit(2)
		}
		for _, p := range ps {
			c, err := compile(p)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			sets[f] = append(sets[f], c)
		}
	}
	// Rounds interleave the files (and pods), so that a drift of the machine reaches each alike.
	times := make([][][]float64, len(files))
	verdict := make([][]bool, len(files))
	for f := range files {
		times[f] = make([][]float64, len(pods))
		verdict[f] = make([]bool, len(pods))
	}
	for r := 0; r < *rounds; r++ {
		for f := range files {
			for i, pod := range pods {
				ok := true
				start := time.Now()
				for k := 0; k < *n; k++ {
					ok = true
					for _, v := range sets[f] {
						res := v.validator.Validate(ctx, podGVR, attrs(pod), nil, ns, celconfig.RuntimeCELCostBudget, nil)
						ok = ok && allowed(res)
					}
				}
				times[f][i] = append(times[f][i], float64(time.Since(start).Nanoseconds())/float64(*n))
				verdict[f][i] = ok
			}
		}
	}
	for f, file := range files {
		for i, pod := range pods {
			sorted := append([]float64(nil), times[f][i]...)
			sort.Float64s(sorted)
			out, _ := json.Marshal(map[string]any{"policies": file, "pod": i, "name": pod.Name, "allowed": verdict[f][i],
				"ns_per_eval_median": sorted[len(sorted)/2], "ns_per_eval_rounds": times[f][i]})
			fmt.Println(string(out))
		}
	}
}
