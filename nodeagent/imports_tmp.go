package nodeagent

// Temporary: keeps the modules the node agent's parts use in go.sum while they are written
// (removed once each is imported for real).
import (
	_ "github.com/containernetworking/cni/libcni"
	_ "github.com/containernetworking/cni/pkg/skel"
	_ "github.com/containernetworking/cni/pkg/types/100"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/apis/meta/v1"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/informers"
	_ "sigs.k8s.io/yaml"
	_ "software.sslmate.com/src/go-pkcs12"
)
