"""The torch.distributed transport as the backend reaches it: the code is
:mod:`ccompress._internal.torch_p2p` (a transport of the communicator layer, under the
adapters); this module names what the backend uses from it."""
from .._internal.torch_p2p import (GlooP2P, StoreBroadcast, from_store, from_torch, readable,
                                   tcp_transport, transport_choice)

__all__ = ["GlooP2P", "StoreBroadcast", "from_store", "from_torch", "readable", "tcp_transport",
           "transport_choice"]
