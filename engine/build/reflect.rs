//! Minimal SPIR-V reflection for engine/build.rs: per shader, the
//! storage-buffer bindings of set 0 (and whether each is read-only /
//! write-only), the size of the push-constant block and the workgroup size,
//! so that the pipeline layout comes from the shader itself and Rust's
//! push-constant mirrors can be checked against the compiled block at
//! compile time (`const _: () = assert!(size_of::<P>() ==
//! shaders::X.push_constant_size)`).

use std::collections::{BTreeMap, HashMap};

/// How a shader accesses one storage-buffer binding.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Access {
    Unused,
    Read,
    Write,
    ReadWrite,
}

/// The access of one binding declared twice.
fn merge(a: Access, b: Access) -> Access {
    match (a, b) {
        (Access::Unused, x) | (x, Access::Unused) => x,
        (Access::Read, Access::Read) => Access::Read,
        (Access::Write, Access::Write) => Access::Write,
        _ => Access::ReadWrite,
    }
}

/// What the pipeline layout needs from one shader.
pub struct Reflection {
    /// Indexed by binding number in set 0.
    pub bindings: Vec<Access>,
    /// Bytes of the push-constant block, rounded up to whole words (0: none).
    pub push_constant_size: u32,
    pub local_size: [u32; 3],
}

enum Type {
    Scalar(u32),
    Vector(u32, u32),
    Array { len_id: u32 },
    RuntimeArray,
    Struct(Vec<u32>),
    Other,
}

const OP_EXECUTION_MODE: u32 = 16;
const OP_TYPE_BOOL: u32 = 20;
const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_VECTOR: u32 = 23;
const OP_TYPE_ARRAY: u32 = 28;
const OP_TYPE_RUNTIME_ARRAY: u32 = 29;
const OP_TYPE_STRUCT: u32 = 30;
const OP_TYPE_POINTER: u32 = 32;
const OP_CONSTANT: u32 = 43;
const OP_VARIABLE: u32 = 59;
const OP_DECORATE: u32 = 71;
const OP_MEMBER_DECORATE: u32 = 72;
const OP_EXECUTION_MODE_ID: u32 = 331;

const MODE_LOCAL_SIZE: u32 = 17;
const MODE_LOCAL_SIZE_ID: u32 = 38;

const DEC_BUFFER_BLOCK: u32 = 3;
const DEC_ARRAY_STRIDE: u32 = 6;
const DEC_NON_WRITABLE: u32 = 24;
const DEC_NON_READABLE: u32 = 25;
const DEC_BINDING: u32 = 33;
const DEC_DESCRIPTOR_SET: u32 = 34;
const DEC_OFFSET: u32 = 35;

const SC_UNIFORM_CONSTANT: u32 = 0;
const SC_UNIFORM: u32 = 2;
const SC_PUSH_CONSTANT: u32 = 9;
const SC_STORAGE_BUFFER: u32 = 12;

/// Reflects a compiled shader's SPIR-V words.
pub fn reflect(words: &[u32]) -> Result<Reflection, String> {
    if words.len() < 5 || words[0] != 0x0723_0203 {
        return Err("not SPIR-V (bad magic number)".into());
    }
    let mut types: HashMap<u32, Type> = HashMap::new();
    let mut pointers: HashMap<u32, (u32, u32)> = HashMap::new(); // id -> (storage class, pointee)
    let mut constants: HashMap<u32, u32> = HashMap::new();
    let mut variables: Vec<(u32, u32, u32)> = Vec::new(); // (id, pointer type, storage class)
    let mut decorations: HashMap<(u32, u32), Vec<u32>> = HashMap::new(); // (id, decoration) -> literals
    let mut member_decorations: HashMap<(u32, u32, u32), Vec<u32>> = HashMap::new(); // (struct, member, decoration)
    let mut local_size = None;

    let mut at = 5;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        let op = words[at] & 0xffff;
        if count == 0 || at + count > words.len() {
            return Err("malformed SPIR-V instruction stream".into());
        }
        let w = &words[at + 1..at + count];
        match op {
            OP_EXECUTION_MODE if w.len() >= 5 && w[1] == MODE_LOCAL_SIZE => {
                local_size = Some([w[2], w[3], w[4]])
            }
            OP_EXECUTION_MODE_ID if w.len() >= 2 && w[1] == MODE_LOCAL_SIZE_ID => {
                return Err(
                    "LocalSizeId (workgroup size from specialization constants) is not supported"
                        .into(),
                )
            }
            OP_TYPE_BOOL => {
                types.insert(w[0], Type::Other);
            }
            OP_TYPE_INT | OP_TYPE_FLOAT => {
                types.insert(w[0], Type::Scalar(w[1] / 8));
            }
            OP_TYPE_VECTOR => {
                types.insert(w[0], Type::Vector(w[1], w[2]));
            }
            OP_TYPE_ARRAY => {
                types.insert(w[0], Type::Array { len_id: w[2] });
            }
            OP_TYPE_RUNTIME_ARRAY => {
                types.insert(w[0], Type::RuntimeArray);
            }
            OP_TYPE_STRUCT => {
                types.insert(w[0], Type::Struct(w[1..].to_vec()));
            }
            OP_TYPE_POINTER => {
                pointers.insert(w[0], (w[1], w[2]));
            }
            OP_CONSTANT if w.len() >= 3 => {
                constants.insert(w[1], w[2]);
            }
            OP_VARIABLE => variables.push((w[1], w[0], w[2])),
            OP_DECORATE if w.len() >= 2 => {
                decorations.insert((w[0], w[1]), w[2..].to_vec());
            }
            OP_MEMBER_DECORATE if w.len() >= 3 => {
                member_decorations.insert((w[0], w[1], w[2]), w[3..].to_vec());
            }
            _ => {}
        }
        at += count;
    }

    let mut bindings: BTreeMap<u32, Access> = BTreeMap::new();
    let mut push_constant_size = 0;
    for &(id, pointer, class) in &variables {
        let Some(&(_, pointee)) = pointers.get(&pointer) else {
            return Err(format!("variable %{id} has no pointer type"));
        };
        match class {
            SC_PUSH_CONSTANT => {
                push_constant_size = size_of_type(
                    pointee,
                    &types,
                    &constants,
                    &decorations,
                    &member_decorations,
                )?
            }
            SC_STORAGE_BUFFER | SC_UNIFORM | SC_UNIFORM_CONSTANT => {
                let set = decorations
                    .get(&(id, DEC_DESCRIPTOR_SET))
                    .and_then(|l| l.first().copied());
                let binding = decorations
                    .get(&(id, DEC_BINDING))
                    .and_then(|l| l.first().copied());
                let (Some(set), Some(binding)) = (set, binding) else {
                    return Err(format!("resource %{id} lacks an explicit set/binding"));
                };
                let is_storage = class == SC_STORAGE_BUFFER
                    || (class == SC_UNIFORM
                        && decorations.contains_key(&(pointee, DEC_BUFFER_BLOCK)));
                if !is_storage {
                    return Err(format!(
                        "binding {binding}: only storage buffers are supported"
                    ));
                }
                if set != 0 {
                    return Err(format!(
                        "binding {binding} is in set {set}; only set 0 is supported"
                    ));
                }
                let members = match types.get(&pointee) {
                    Some(Type::Struct(m)) => m.len() as u32,
                    _ => 0,
                };
                let all_members = |dec: u32| {
                    decorations.contains_key(&(id, dec))
                        || (members > 0
                            && (0..members)
                                .all(|m| member_decorations.contains_key(&(pointee, m, dec))))
                };
                let access = match (all_members(DEC_NON_WRITABLE), all_members(DEC_NON_READABLE)) {
                    (true, false) => Access::Read,
                    (false, true) => Access::Write,
                    (false, false) => Access::ReadWrite,
                    (true, true) => Access::Unused,
                };
                // A binding declared twice (one buffer read through two
                // block types, e.g. words and 16-byte vectors) is accessed
                // as both declarations together.
                let access = match bindings.get(&binding) {
                    None => access,
                    Some(&prev) => merge(prev, access),
                };
                bindings.insert(binding, access);
            }
            _ => {}
        }
    }
    let count = bindings.keys().next_back().map_or(0, |b| b + 1);
    let bindings = (0..count)
        .map(|b| bindings.get(&b).copied().unwrap_or(Access::Unused))
        .collect();
    let local_size =
        local_size.ok_or("no LocalSize execution mode (layout(local_size_x = ...) in;)")?;
    Ok(Reflection {
        bindings,
        push_constant_size: push_constant_size.div_ceil(4) * 4,
        local_size,
    })
}

/// Bytes a push-constant type occupies: the end of its last member (std430 offsets
/// come from the Offset decorations).
fn size_of_type(
    id: u32,
    types: &HashMap<u32, Type>,
    constants: &HashMap<u32, u32>,
    decorations: &HashMap<(u32, u32), Vec<u32>>,
    member_decorations: &HashMap<(u32, u32, u32), Vec<u32>>,
) -> Result<u32, String> {
    match types.get(&id) {
        Some(Type::Scalar(bytes)) => Ok(*bytes),
        Some(Type::Vector(elem, n)) => {
            Ok(n * size_of_type(*elem, types, constants, decorations, member_decorations)?)
        }
        Some(Type::Array { len_id, .. }) => {
            let len = constants
                .get(len_id)
                .ok_or("array length is not a plain constant")?;
            let stride = decorations
                .get(&(id, DEC_ARRAY_STRIDE))
                .and_then(|l| l.first())
                .ok_or("array without ArrayStride")?;
            Ok(len * stride)
        }
        Some(Type::Struct(members)) => {
            let mut end = 0;
            for (i, &member) in members.iter().enumerate() {
                let offset = member_decorations
                    .get(&(id, i as u32, DEC_OFFSET))
                    .and_then(|l| l.first().copied())
                    .ok_or("struct member without Offset")?;
                end = end.max(
                    offset
                        + size_of_type(member, types, constants, decorations, member_decorations)?,
                );
            }
            Ok(end)
        }
        Some(Type::RuntimeArray) => Err("runtime array in a push-constant block".into()),
        Some(Type::Other) | None => Err(format!("unsupported type %{id} in a push-constant block")),
    }
}
