//! Membership by SWIM, through foca: who is up, suspected or down, on the
//! node's clock. (Filled by the node-protocol work.)
