//! Who is on the other end of a connection: the identity from the client certificate, merged with
//! what the agent's `Hello` says about itself. Rows are stamped with this, never with payload claims.

use oomlens_schema::GpuInfo;

/// The authenticated agent of one connection.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentIdentity {
    /// Cluster: the certificate's `OU` when it names one, else the agent's configured cluster.
    pub cluster: String,
    /// Node: the certificate's common name.
    pub node: String,
    /// Agent installation id (from Hello).
    pub agent_id: String,
    /// Sequence space of this agent run (from Hello).
    pub boot_id: u64,
    /// Agent version (from Hello).
    pub agent_version: String,
    /// GPU inventory (from Hello).
    pub gpus: Vec<GpuInfo>,
}
