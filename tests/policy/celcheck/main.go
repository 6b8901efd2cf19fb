// Command celcheck evaluates ValidatingAdmissionPolicies on pods the way kube-apiserver does, in
// process, with k8s.io/apiserver's own code of the release the e2e suite runs (1.37): the
// policy's matchConstraints and its binding's matchResources (generic.PolicyMatcher), the match
// conditions, the variables, the validations and their messageExpressions (the compiled
// validator of the validating plugin), on typed v1 Pods. It is the test harness of
// tests/policy/test_admission_policy_cel.py; scripts/build-celcheck.sh builds it.
//
//	celcheck -policies objects.yaml -pods pods.json
//
// objects.yaml: ValidatingAdmissionPolicies and their bindings (other kinds are skipped).
// pods.json: a JSON list of v1 Pods as the API server holds them when it runs the policies
// (after every mutating webhook). Output: a JSON list with one object per (policy, pod):
//
//	{"policy": NAME, "pod": INDEX, "selected": the match constraints and a binding select the pod,
//	 "matched": every match condition holds, "match_error": "",
//	 "validations": [{"passed": bool, "message": the API server's message for a failure, "error": ""}],
//	 "denied": the API server refuses the pod (selected, matched, a Deny binding, a validation failed),
//	 "status": the message of its refusal (the dispatcher's words, for the first failed validation)}
//
// The validations are evaluated for every selected pod, also where the match conditions do not
// hold (the API server would skip them there), so that a test can check that the match condition
// and the validations agree.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	kjson "sigs.k8s.io/json"
)

type policy struct {
	vap      *admissionregistrationv1.ValidatingAdmissionPolicy
	bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	matcher  matchconditions.Matcher // nil without match conditions
	checks   validating.Validator    // the validations alone, without the match conditions
}

type validation struct {
	Passed  bool   `json:"passed"`
	Message string `json:"message"`
	Error   string `json:"error"`
}

type result struct {
	Policy      string       `json:"policy"`
	Pod         int          `json:"pod"`
	Selected    bool         `json:"selected"`
	Matched     bool         `json:"matched"`
	MatchError  string       `json:"match_error"`
	Validations []validation `json:"validations"`
	Denied      bool         `json:"denied"`
	Status      string       `json:"status"`
}

// compile builds a policy's match conditions and validations as the validating plugin's
// compilePolicy does (unexported there): one composited compiler holding the variables, the
// base environment of the default compatibility version, stored expressions.
func compile(p *admissionregistrationv1.ValidatingAdmissionPolicy) (matchconditions.Matcher, validating.Validator, error) {
	hasParams := p.Spec.ParamKind != nil
	vars := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}
	msgVars := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: false}
	c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return nil, nil, err
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
		matcher = matchconditions.NewMatcher(c.CompileCondition(acc, vars, environment.StoredExpressions),
			p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}
	checks := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		checks[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	val := validating.NewValidator(c.CompileCondition(checks, vars, environment.StoredExpressions), nil,
		c.CompileCondition(nil, vars, environment.StoredExpressions),
		c.CompileCondition(messages, msgVars, environment.StoredExpressions), p.Spec.FailurePolicy, nil)
	return matcher, val, nil
}

// compileErrors: a compile error of any expression, as the API server reports it at admission.
func compileErrors(p *admissionregistrationv1.ValidatingAdmissionPolicy) []string {
	var out []string
	env := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	c, _ := plugincel.NewCompositedCompiler(env)
	vars := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil, HasAuthorizer: true}
	for _, v := range p.Spec.Variables {
		r := c.CompileCELExpression(&validating.Variable{Name: v.Name, Expression: v.Expression}, vars, environment.StoredExpressions)
		if r.Error != nil {
			out = append(out, fmt.Sprintf("variable %s: %v", v.Name, r.Error))
		}
		c.CompileAndStoreVariables([]plugincel.NamedExpressionAccessor{&validating.Variable{Name: v.Name, Expression: v.Expression}}, vars, environment.StoredExpressions)
	}
	for i := range p.Spec.MatchConditions {
		if r := c.CompileCELExpression((*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i]), vars, environment.StoredExpressions); r.Error != nil {
			out = append(out, fmt.Sprintf("matchCondition %s: %v", p.Spec.MatchConditions[i].Name, r.Error))
		}
	}
	msgVars := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil, HasAuthorizer: false}
	for i, v := range p.Spec.Validations {
		if r := c.CompileCELExpression(&validating.ValidationCondition{Expression: v.Expression}, vars, environment.StoredExpressions); r.Error != nil {
			out = append(out, fmt.Sprintf("validations[%d].expression: %v", i, r.Error))
		}
		if v.MessageExpression != "" {
			if r := c.CompileCELExpression(&validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}, msgVars, environment.StoredExpressions); r.Error != nil {
				out = append(out, fmt.Sprintf("validations[%d].messageExpression: %v", i, r.Error))
			}
		}
	}
	return out
}

// decodeStrict decodes an object as the API server does for a create with fieldValidation=Strict
// (kubectl's default): field names case-sensitively, and an unknown or repeated field is an
// error. encoding/json would match "Variables" or "NAME" to a field and drop unknown ones.
func decodeStrict(b []byte, into any) error {
	strict, err := kjson.UnmarshalStrict(b, into, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return fmt.Errorf("strict decoding error: %v", errors.Join(strict...))
	}
	return nil
}

func readObjects(path string) ([]*policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var policies []*policy
	var bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		b, _ := json.Marshal(raw)
		switch raw["kind"] {
		case "ValidatingAdmissionPolicy":
			p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
			if err := decodeStrict(b, p); err != nil {
				return nil, err
			}
			if errs := compileErrors(p); len(errs) > 0 {
				return nil, fmt.Errorf("ValidatingAdmissionPolicy %s does not compile: %v", p.Name, errs)
			}
			matcher, checks, err := compile(p)
			if err != nil {
				return nil, err
			}
			policies = append(policies, &policy{vap: p, matcher: matcher, checks: checks})
		case "ValidatingAdmissionPolicyBinding":
			bd := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			if err := decodeStrict(b, bd); err != nil {
				return nil, err
			}
			bindings = append(bindings, bd)
		}
	}
	for _, bd := range bindings {
		for _, p := range policies {
			if p.vap.Name == bd.Spec.PolicyName {
				p.bindings = append(p.bindings, bd)
			}
		}
	}
	return policies, nil
}

var podGVK = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
var podGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

func attributes(pod *corev1.Pod) *admission.VersionedAttributes {
	rec := admission.NewAttributesRecord(pod, nil, podGVK, pod.Namespace, pod.Name, podGVR, "", admission.Create,
		&metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "system:serviceaccount:kubeflow:training-operator"})
	return &admission.VersionedAttributes{Attributes: rec, VersionedObject: admission.NewLazyObject(pod), VersionedKind: podGVK}
}

func denies(bd *admissionregistrationv1.ValidatingAdmissionPolicyBinding) bool {
	for _, a := range bd.Spec.ValidationActions {
		if a == admissionregistrationv1.Deny {
			return true
		}
	}
	return false
}

func evaluate(ctx context.Context, pm generic.PolicyMatcher, oi admission.ObjectInterfaces, p *policy, i int, pod *corev1.Pod) result {
	r := result{Policy: p.vap.Name, Pod: i, Validations: []validation{}}
	va := attributes(pod)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pod.Namespace}}
	ok, _, _, err := pm.DefinitionMatches(va, oi, validating.NewValidatingAdmissionPolicyAccessor(p.vap))
	var binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	if err == nil && ok {
		for _, bd := range p.bindings {
			if bok, berr := pm.BindingMatches(va, oi, validating.NewValidatingAdmissionPolicyBindingAccessor(bd)); berr == nil && bok {
				binding = bd
				break
			}
		}
	}
	r.Selected = binding != nil
	if !r.Selected {
		return r
	}
	r.Matched = true
	if p.matcher != nil {
		m := p.matcher.Match(ctx, va, nil, nil)
		if m.Error != nil {
			r.MatchError = m.Error.Error()
		}
		r.Matched = m.Matches
	}
	res := p.checks.Validate(ctx, podGVR, va, nil, ns, celconfig.RuntimeCELCostBudget, nil)
	first := ""
	for _, d := range res.Decisions {
		v := validation{Passed: d.Action == validating.ActionAdmit}
		if d.Evaluation == validating.EvalError {
			v.Error = d.Message
		} else if !v.Passed {
			v.Message = d.Message
		}
		if !v.Passed && first == "" {
			first = d.Message
		}
		r.Validations = append(r.Validations, v)
	}
	if r.Matched && first != "" && denies(binding) {
		r.Denied = true
		r.Status = fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", p.vap.Name, binding.Name, first)
	}
	if r.MatchError != "" && denies(binding) { // failurePolicy Fail: an error in the match conditions refuses
		r.Denied = true
		r.Status = r.MatchError
	}
	return r
}

func main() {
	objects := flag.String("policies", "", "YAML of ValidatingAdmissionPolicies and their bindings")
	podsFile := flag.String("pods", "", "JSON list of v1 Pods ('-': standard input)")
	flag.Parse()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "celcheck:", err)
		os.Exit(2)
	}
	if *objects == "" || *podsFile == "" {
		fail(errors.New("give -policies FILE and -pods FILE"))
	}
	policies, err := readObjects(*objects)
	if err != nil {
		fail(err)
	}
	if len(policies) == 0 {
		fail(fmt.Errorf("%s holds no ValidatingAdmissionPolicy", *objects))
	}
	var raw []byte
	if *podsFile == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(*podsFile)
	}
	if err != nil {
		fail(err)
	}
	var pods []*corev1.Pod
	if err := json.Unmarshal(raw, &pods); err != nil {
		fail(fmt.Errorf("pods: %w", err))
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		fail(err)
	}
	oi := admission.NewObjectInterfacesFromScheme(scheme)
	pm := generic.NewPolicyMatcher(matching.NewMatcher(nil, nil))
	ctx := context.Background()
	out := []result{}
	for _, p := range policies {
		for i, pod := range pods {
			out = append(out, evaluate(ctx, pm, oi, p, i, pod))
		}
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		fail(err)
	}
}
