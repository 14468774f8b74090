"""The Kubernetes pool: Kueue and node add-ons as Pulumi components (`objects`), and the admission
adapter over the API server (`adapter`): taints, labels and annotations on Node objects."""
