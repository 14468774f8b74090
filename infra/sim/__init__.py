"""The embedded simulated cloud and fleet behind the `local` stacks: real plan, real Pulumi program
under mocks, node outputs in the real tools' formats, a fabric model and a virtual clock."""
