// Command patchcost times what kube-apiserver does with a mutating webhook's answer once it has
// the bytes, in process, with k8s.io/apiserver 1.37's own code: decode the AdmissionReview (the
// webhook client's codec), verify it, decode the JSON patch, encode the pod as JSON, apply the
// patch, decode the result into a v1 Pod, compare it with the pod sent (Semantic.DeepEqual) and
// marshal the patch into its audit annotation (the steps of the mutating dispatcher's
// callAttrMutatingHook, whose function is unexported). Object defaulting, the last step there,
// needs k8s.io/kubernetes and is left out: it walks the pod, whatever patch made it.
//
// Why: behind a real API server our one /mutate call costs the API server more than the Go
// yardstick's (benchmarks/e2e_latency.py, the API server's mean per call), while our server on its
// own answers within a few percent of Go's (benchmarks/lowrate.py). Our patch has more operations
// and bytes than Go's for the same pod; this says what that difference costs the API server.
//
//	go run ./patchcost -cases cases.json [-n 20000] [-rounds 5]   (in benchmarks/celcost)
//
// cases.json: a JSON list of {"name", "request", "answers": {label: response}}, where request is
// the AdmissionReview sent and each response one webhook's AdmissionReview answer (JSON values).
// Output: one JSON object per (case, label): ns per call of each step and of all of them (the
// median of the rounds; the labels of a case alternate within each round).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	webhookrequest "k8s.io/apiserver/pkg/admission/plugin/webhook/request"
)

type inputCase struct {
	Name    string                     `json:"name"`
	Request json.RawMessage            `json:"request"`
	Answers map[string]json.RawMessage `json:"answers"`
}

// steps, in the dispatcher's order.
var steps = []string{"decode_review", "verify", "decode_patch", "encode_pod", "apply", "decode_pod", "deep_equal", "annotation"}

type env struct {
	hookCodec runtime.Decoder // the webhook client's: a LegacyCodec over admission v1 and v1beta1
	podJSON   *kjson.Serializer
	scheme    *runtime.Scheme
}

func newEnv() env {
	hook := runtime.NewScheme()
	must(admissionv1beta1.AddToScheme(hook))
	must(admissionv1.AddToScheme(hook))
	gvs := []schema.GroupVersion{admissionv1.SchemeGroupVersion, admissionv1beta1.SchemeGroupVersion}
	pods := runtime.NewScheme()
	must(corev1.AddToScheme(pods))
	return env{
		hookCodec: serializer.NewCodecFactory(hook).LegacyCodec(gvs...),
		podJSON:   kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, pods, pods, kjson.SerializerOptions{}),
		scheme:    pods,
	}
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// one handles one answer, adding each step's time to spent. It returns the patched pod's JSON
// size, so a wrong answer cannot pass unnoticed.
func (e env) one(sent *corev1.Pod, uid string, body []byte, spent []time.Duration) int {
	t := time.Now()
	mark := func(i int) {
		now := time.Now()
		spent[i] += now.Sub(t)
		t = now
	}
	review := &admissionv1.AdmissionReview{}
	must(runtime.DecodeInto(e.hookCodec, body, review))
	mark(0)
	result, err := webhookrequest.VerifyAdmissionResponse(types.UID(uid), true, review)
	must(err)
	mark(1)
	patch, err := jsonpatch.DecodePatch(result.Patch)
	must(err)
	mark(2)
	objJS, err := runtime.Encode(e.podJSON, sent)
	must(err)
	mark(3)
	patched, err := patch.Apply(objJS)
	must(err)
	mark(4)
	obj, _, err := e.podJSON.Decode(patched, nil, &corev1.Pod{})
	must(err)
	mark(5)
	if equality.Semantic.DeepEqual(sent, obj) {
		must(fmt.Errorf("the patch changed nothing"))
	}
	mark(6)
	ann, err := utiljson.Marshal(struct {
		Configuration string      `json:"configuration"`
		Webhook       string      `json:"webhook"`
		Patch         interface{} `json:"patch,omitempty"`
		PatchType     string      `json:"patchType,omitempty"`
	}{"rdma-webhook", "pods.rdma-webhook.io", patch, "JSONPatch"})
	must(err)
	mark(7)
	return len(patched) + len(ann)
}

func main() {
	casesPath := flag.String("cases", "", "JSON list of cases (see the package comment)")
	n := flag.Int("n", 20000, "calls per answer per round")
	rounds := flag.Int("rounds", 5, "rounds; the median is reported")
	flag.Parse()
	raw, err := os.ReadFile(*casesPath)
	must(err)
	var cases []inputCase
	must(json.Unmarshal(raw, &cases))
	e := newEnv()
	var out []map[string]interface{}
	for _, c := range cases {
		req := &admissionv1.AdmissionReview{}
		must(runtime.DecodeInto(e.hookCodec, c.Request, req))
		sent := &corev1.Pod{}
		_, _, err := e.podJSON.Decode(req.Request.Object.Raw, nil, sent)
		must(err)
		uid := string(req.Request.UID)
		labels := make([]string, 0, len(c.Answers))
		for l := range c.Answers {
			labels = append(labels, l)
		}
		sort.Strings(labels)
		perRound := map[string][][]float64{} // label -> step -> rounds
		size := map[string]int{}
		for _, l := range labels {
			perRound[l] = make([][]float64, len(steps)+1)
			size[l] = e.one(sent, uid, c.Answers[l], make([]time.Duration, len(steps))) // warm
		}
		for r := 0; r < *rounds; r++ {
			for k := range labels {
				l := labels[(k+r)%len(labels)]
				spent := make([]time.Duration, len(steps))
				for i := 0; i < *n; i++ {
					e.one(sent, uid, c.Answers[l], spent)
				}
				var total time.Duration
				for i, d := range spent {
					perRound[l][i] = append(perRound[l][i], float64(d.Nanoseconds())/float64(*n))
					total += d
				}
				perRound[l][len(steps)] = append(perRound[l][len(steps)], float64(total.Nanoseconds())/float64(*n))
			}
		}
		for _, l := range labels {
			row := map[string]interface{}{"case": c.Name, "answer": l, "patched_and_annotation_bytes": size[l]}
			ns := map[string]float64{}
			for i, s := range steps {
				ns[s] = median(perRound[l][i])
			}
			ns["total"] = median(perRound[l][len(steps)])
			row["ns"] = ns
			row["total_ns_rounds"] = perRound[l][len(steps)]
			out = append(out, row)
		}
	}
	enc := json.NewEncoder(os.Stdout)
	must(enc.Encode(out))
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
