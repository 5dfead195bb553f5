//! Reads SWIM packets as foca wrote them, so that a test can see what the
//! members say about one another (who is suspected, at which incarnation)
//! without asking the node. The node never looks inside these packets;
//! only the tests do.

use foca::{Codec, Header, Member, PostcardCodec};

use crate::protocol::MemberId;

/// The membership updates a packet carries: a header, then a big-endian
/// count and that many members (foca's layout; a broadcast carries none).
pub(super) fn updates(packet: &[u8]) -> Result<Vec<Member<MemberId<u32>>>, String> {
    let mut data: &[u8] = packet;
    let header: Header<MemberId<u32>> = PostcardCodec
        .decode_header(&mut data)
        .map_err(|error| format!("its header: {error}"))?;
    let mut members = Vec::new();
    if data.len() < 2 || header.message == foca::Message::Broadcast {
        return Ok(members);
    }
    let count = u16::from_be_bytes([data[0], data[1]]);
    data = &data[2..];
    for number in 0..count {
        let member = PostcardCodec
            .decode_member(&mut data)
            .map_err(|error| format!("update {number} of {count}: {error}"))?;
        members.push(member);
    }
    Ok(members)
}
