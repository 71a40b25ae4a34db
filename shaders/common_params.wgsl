// common_params.wgsl (#include common_params): the 32-byte per-call params block that
// bitweb.kernels.ops.params() writes (one layout for every shader that reads it):
//   m        rows in this call (prefill rows M; LASTROW kernels read row m - 1)
//   pos      decode: position of the current token; prefill: position of row 0
//   n_ids    number of token ids in the penalty id buffer
//   penalty  repetition penalty r (1.0 = off);  inv_temp  1 / temperature;  r0..r2 reserved (0)
// Needs nothing from the including shader.

struct Params { m: u32, pos: u32, n_ids: u32, penalty: f32, inv_temp: f32, r0: u32, r1: u32, r2: u32 }
