"""Run folders: shards, manifests and resume (:mod:`.folder`), ownership and
locks (:mod:`.guard`), clean stops on signals and a full disk (:mod:`.stops`),
and checks of the paths a command is given (:mod:`.inputs`)."""
