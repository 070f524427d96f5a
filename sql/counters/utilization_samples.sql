-- counters.utilization_samples: TPU unit utilization in every counter sample, computed
-- from the counters table the way XProf's utilization_viewer computes it
-- (openxla/xprof xprof/convert/xplane_to_utilization_viewer.cc and
-- tpu_generic_utilization_utils.cc): one row per (sample, node, metric) with
-- what the unit achieved and what it could have achieved in that sample.
--
-- Chips: TPU v6e ('TPU v6 Lite') and TPU v7x ('TPU v7', 'TPU v7x'), the chips
-- XProf's tool reads. A sample is one counter line (counters.kernel = its line
-- name, counters.sample = its line id); counters are matched by name
-- (counters.counter, lowercased enum names of the xprof wheel's
-- tpu_counter_ids_<chip>.h), so the same query serves both chips:
--   TensorCore (node = die): cycles = COUNT_CYCLES (v6e) or the power
--     manager's CYCLE_COUNT of the die (v7x); no TensorCore rows when that is
--     absent or 0. Scalar Unit = 2 ALUs, Vector ALUs = 4, Vmem Loads = 2 per
--     cycle; Avg MXU Busy = (MXU_BUSY_1 / 2 + MXU_BUSY_2) / cycles; MXU0/MXU1
--     and per-precision rows weight matmul counts by cycles per instruction
--     (LMR bf16 4, i8/i4 2; VREG 8, f32 4) over 2 MXUs; XLU0/XLU1 =
--     instructions over cycles / cycles-per-XLU-instruction (v6e 4, v7x 1,
--     integer division as XProf).
--   HBM (node 0, metric 'HBM Rd+Wr - core N'): 32 bytes per read-response and
--     write-request beat of every HBM controller of the die, over peak
--     bandwidth x COUNT_CYCLES / clock (v6e 1525.5 GiB/s at 1.75 GHz, v7x
--     3433 GiB/s per die at 1.9 GHz: XProf's constants).
--   ICI (node 0): 128 bytes per bn read / write request inserted at the
--     interconnect router (v6e: OCI ICR, requests 0 and 1; v7x: die 1's four
--     ICRs, request 0), over 294.947 GB/s x cycles / 1 GHz, as XProf.
--   SparseCore (node = die * 2 + core): tile issue counts over 16 x tile 0's
--     cycles; sequencer counts over the sequencer's cycles.
-- A counter a sample lacks counts 0 (XProf's rule); a value that could not be
-- read (all ones) was dropped at ingest, so it counts 0 too. Differences from
-- XProf: no plane device_id stat is needed; SparseCore rows need their cycle
-- counter (XProf writes them with peak 0); v7x ICI rows appear once per
-- sample (XProf repeats them per die: the same ratios).
--
-- Needs: TPU performance-counter samples (XSpace perf_counters lines: TPU v6e, v7x)
--
-- Parameters:
--
-- Show: profile_id, device_id, chip, kernel, sample, node, metric, achieved, peak, unit, utilization
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_id  INTEGER  devices.device_id of the chip's plane
--   chip  BIGINT  chip as XProf's perf_counters names it: plane stat global_chip_id, else device_id, else the plane ordinal
--   generation  VARCHAR  counter dictionary of the chip: v6e or v7x
--   kernel  VARCHAR  the sample's kernel (counters.kernel: its line name)
--   sample  BIGINT  the sample (counters.sample: its line id)
--   start_ps  BIGINT  sample start, ps (earliest counter start)
--   end_ps  BIGINT  sample end, ps (latest counter end)
--   node  INTEGER  XProf's node: TensorCore = die, SparseCore = die * 2 + core, 0 for HBM and ICI rows
--   metric  VARCHAR  XProf's metric name: Avg MXU Busy, Vector ALUs, XLU0, HBM Rd+Wr - core 0, ICI (Read), ...
--   achieved  DOUBLE  what the unit did in the sample, in unit
--   peak  DOUBLE  what it could have done in the sample, in unit
--   unit  VARCHAR  cycles, instructions, bytes or percent
--   utilization  DOUBLE  achieved / peak; NULL when peak is 0
WITH chips AS (
    SELECT
        d.profile_id,
        d.device_id,
        CASE WHEN d.model = 'TPU v6 Lite' THEN 'v6e' ELSE 'v7x' END AS generation,
        coalesce(
            (SELECT any_value(coalesce(s.uint_value::BIGINT, s.int_value)) FROM device_stats AS s
             WHERE s.profile_id = d.profile_id AND s.device_id = d.device_id AND s.stat = 'global_chip_id'),
            (SELECT any_value(coalesce(s.uint_value::BIGINT, s.int_value)) FROM device_stats AS s
             WHERE s.profile_id = d.profile_id AND s.device_id = d.device_id AND s.stat = 'device_id'),
            d.ordinal
        ) AS chip
    FROM devices AS d
    WHERE d.model IN ('TPU v6 Lite', 'TPU v7', 'TPU v7x')
),
constants(generation, frequency_hz, peak_hbm_bytes_per_s, cycles_per_xlu) AS (
    VALUES ('v6e', 1.75e9, 1525.5 * 1073741824, 4), ('v7x', 1.9e9, 3433.0 * 1073741824, 1)
),
-- Counter names split into the unit they count in and what they count.
parsed AS (
    SELECT
        c.profile_id, c.device_id, ch.chip, ch.generation, c.kernel, c.sample, c.start_ps, c.end_ps,
        c.value_double AS value,
        regexp_extract(c.counter,
            '^vf_chip_(?:die(\d)_)?(?:(tc)_tcs_tc_misc_tcs_stats_tcs_stats_counters_unprivileged_count_'
            || '|(pwr)mgr_pwrmgr_tc_throttle_core_debug_stats_unprivileged_'
            || '|(hbm)_\d+_(?:ss_)?hbmc_\d+_cmn_hi_freq_stats_counters_unprivileged_'
            || '|(oci)_icr_(?:\d+_)?perf_counters_fifo_stats_counters_unprivileged_'
            || '|sc_(\d)_(?:(sct)([cd]?)_(\d+)|(scs))_sc_stats_counters_unprivileged_count_)'
            || '([a-z0-9_]+?)(?:_ps[01])?$',
            ['die', 'tc', 'pwr', 'hbm', 'oci', 'sc_core', 'sct', 'sub', 'tile', 'scs', 'key']) AS m
    FROM counters AS c
    JOIN chips AS ch USING (profile_id, device_id)
    WHERE c.counter LIKE 'vf\_chip\_%' ESCAPE '\' AND c.value_double IS NOT NULL
),
units AS (
    SELECT
        profile_id, device_id, chip, generation, kernel, sample, start_ps, end_ps, value,
        m.tc || m.pwr || m.hbm || m.oci || m.sct || m.scs AS domain,
        coalesce(TRY_CAST(nullif(m.die, '') AS INTEGER), 0) AS die,
        coalesce(TRY_CAST(nullif(m.die, '') AS INTEGER), 0) * 2 + TRY_CAST(nullif(m.sc_core, '') AS INTEGER) AS sc_node,
        m.sub,
        TRY_CAST(nullif(m.tile, '') AS INTEGER) AS tile,
        m.key
    FROM parsed
    WHERE m.key <> ''
),
samples AS (
    SELECT profile_id, device_id, chip, generation, kernel, sample, min(start_ps) AS start_ps, max(end_ps) AS end_ps
    FROM units
    GROUP BY ALL
),
-- Per sample and die: the cycle counts the peaks are made of.
die_cycles AS (
    SELECT
        profile_id, device_id, kernel, sample, die,
        max(value) FILTER (WHERE domain = 'tc' AND key = 'cycles') AS count_cycles,
        max(value) FILTER (WHERE domain = 'pwr' AND key = 'cycle_count') AS pwr_cycles
    FROM units
    WHERE domain IN ('tc', 'pwr')
    GROUP BY ALL
),
sc_cycles AS (
    SELECT
        profile_id, device_id, kernel, sample, sc_node,
        max(value) FILTER (WHERE domain = 'sct' AND key = 'cycles' AND tile = 0
                           AND sub = CASE generation WHEN 'v6e' THEN '' ELSE 'd' END) AS tile_cycles,
        max(value) FILTER (WHERE domain = 'scs' AND key = 'cycles') AS scs_cycles
    FROM units
    WHERE domain IN ('sct', 'scs')
    GROUP BY ALL
),
-- Metric definitions: scope (tc, hbm, ici, sct, scs), peak = multiplier x base.
metrics(generations, metric, scope, base, multiplier, unit) AS (
    VALUES
        (['v7x'], 'Clocks Skipped', 'tc', 'cycles', 1, 'cycles'),
        (['v7x'], 'Ext Throttle Clocks Skipped', 'tc', 'cycles', 1, 'cycles'),
        (['v7x'], 'LDIDT Droop Clocks Skipped', 'tc', 'cycles', 1, 'cycles'),
        (['v6e', 'v7x'], 'Scalar Unit', 'tc', 'cycles', 2, 'instructions'),
        (['v6e', 'v7x'], 'Vector ALUs', 'tc', 'cycles', 4, 'instructions'),
        (['v6e', 'v7x'], 'VPU Utilization', 'tc', 'cycles', 4, 'instructions'),
        (['v6e', 'v7x'], 'Vmem Stores', 'tc', 'cycles', 1, 'instructions'),
        (['v6e', 'v7x'], 'Vmem Loads', 'tc', 'cycles', 2, 'instructions'),
        (['v6e', 'v7x'], 'No MXU Busy', 'tc', 'cycles', 1, 'cycles'),
        (['v6e', 'v7x'], '1 MXU Busy', 'tc', 'cycles', 1, 'cycles'),
        (['v6e', 'v7x'], '2 MXU Busy', 'tc', 'cycles', 1, 'cycles'),
        (['v6e', 'v7x'], 'Avg MXU Busy', 'tc', 'cycles', 1, 'cycles'),
        (['v6e', 'v7x'], 'MXU0', 'tc', 'cycles', 1, 'cycles'),
        (['v6e', 'v7x'], 'MXU1', 'tc', 'cycles', 1, 'cycles'),
        (['v6e', 'v7x'], 'MXU BF16', 'tc', 'cycles', 2, 'cycles'),
        (['v6e'], 'MXU I8', 'tc', 'cycles', 2, 'cycles'),
        (['v6e'], 'MXU I4', 'tc', 'cycles', 2, 'cycles'),
        (['v7x'], 'MXU E4M3 + E5M2', 'tc', 'cycles', 2, 'cycles'),
        (['v6e', 'v7x'], 'MXU matpush', 'tc', 'cycles', 2, 'cycles'),
        (['v6e', 'v7x'], 'No XLU Busy', 'tc', 'cycles', 1, 'cycles'),
        (['v6e', 'v7x'], '1 XLU Busy', 'tc', 'cycles', 1, 'cycles'),
        (['v6e', 'v7x'], '2 XLUs Busy', 'tc', 'cycles', 1, 'cycles'),
        (['v6e', 'v7x'], 'Avg XLU Busy', 'tc', 'cycles', 1, 'cycles'),
        (['v6e', 'v7x'], 'XLU0', 'tc', 'xlu_cycles', 1, 'instructions'),
        (['v6e', 'v7x'], 'XLU1', 'tc', 'xlu_cycles', 1, 'instructions'),
        (['v6e', 'v7x'], 'HBM Rd+Wr', 'hbm', 'hbm_bytes', 1, 'bytes'),
        (['v6e', 'v7x'], 'ICI (Read)', 'ici', 'ici_bytes', 1, 'bytes'),
        (['v6e', 'v7x'], 'ICI (Write)', 'ici', 'ici_bytes', 1, 'bytes'),
        (['v6e', 'v7x'], 'TEC Scalar Issue', 'sct', 'tile_cycles', 16, 'instructions'),
        (['v6e', 'v7x'], 'TEC Scalar Issue: S0 slot', 'sct', 'tile_cycles', 16, 'instructions'),
        (['v6e', 'v7x'], 'TEC Scalar Issue: S1 slot', 'sct', 'tile_cycles', 16, 'instructions'),
        (['v6e', 'v7x'], 'TEC Scalar Issue: Smisc slot', 'sct', 'tile_cycles', 16, 'instructions'),
        (['v6e', 'v7x'], 'SC Vector Issue', 'sct', 'tile_cycles', 16, 'instructions'),
        (['v6e'], 'SC Vector Issue:V0 Slot', 'sct', 'tile_cycles', 16, 'instructions'),
        (['v7x'], 'SC Vector Issue: V0 Slot', 'sct', 'tile_cycles', 16, 'instructions'),
        (['v6e', 'v7x'], 'SC Vector Issue: V1 Slot', 'sct', 'tile_cycles', 16, 'instructions'),
        (['v6e', 'v7x'], 'SC Vector Issue: V2 Slot', 'sct', 'tile_cycles', 16, 'instructions'),
        (['v6e', 'v7x'], 'SC Vector Issue: VLD Slot', 'sct', 'tile_cycles', 16, 'instructions'),
        (['v6e', 'v7x'], 'SC Vector Issue: VST Slot', 'sct', 'tile_cycles', 16, 'instructions'),
        (['v6e'], 'SC Vector Issue:VEX Slot', 'sct', 'tile_cycles', 16, 'instructions'),
        (['v7x'], 'SC Vector Issue: VEX Slot', 'sct', 'tile_cycles', 16, 'instructions'),
        (['v6e'], 'SC Vector Issue:VRES Slot', 'sct', 'tile_cycles', 16, 'instructions'),
        (['v7x'], 'SC Vector Issue: VRES Slot', 'sct', 'tile_cycles', 16, 'instructions'),
        (['v6e', 'v7x'], 'SCS Scalar Issue', 'scs', 'scs_cycles', 1, 'instructions'),
        (['v6e', 'v7x'], 'SCS: S0 Slot', 'scs', 'scs_cycles', 1, 'instructions'),
        (['v6e', 'v7x'], 'SCS: S1 Slot', 'scs', 'scs_cycles', 1, 'instructions'),
        (['v6e', 'v7x'], 'SCS: Smisc Slot', 'scs', 'scs_cycles', 1, 'instructions')
),
-- What each metric counts: weight x every counter (domain, key) in suffixes; die: only that die's counters.
term_families(generations, metric, domain, prefix, suffixes, weight, die) AS (
    VALUES
        (['v7x'], 'Clocks Skipped', 'pwr', 'clocks_skipped', [''], 1.0, NULL),
        (['v7x'], 'Ext Throttle Clocks Skipped', 'pwr', 'ext_throttle_clocks_skipped', [''], 1.0, NULL),
        (['v7x'], 'LDIDT Droop Clocks Skipped', 'pwr', 'ldidt_droop_clocks_skipped', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'Scalar Unit', 'tc', 'scalar_alu_instruction_', ['0', '1'], 1.0, NULL),
        (['v6e', 'v7x'], 'Vector ALUs', 'tc', 'vector_alu_instruction_', ['0', '1', '2', '3'], 1.0, NULL),
        (['v6e', 'v7x'], 'VPU Utilization', 'tc', 'vpu_valu_',
            ['fadd_ops_0', 'fadd_ops_1', 'fadd_ops_2', 'fadd_ops_3', 'fmul_ops_0', 'fmul_ops_1', 'fmul_ops_2',
             'fmul_ops_3', 'misc_ops_0', 'misc_ops_1', 'misc_ops_2', 'misc_ops_3', 'int_ops_0', 'int_ops_1',
             'int_ops_2', 'int_ops_3', 'fmac_ops_0', 'fmac_ops_1', 'fmac_ops_2', 'fmac_ops_3'], 1.0, NULL),
        (['v6e', 'v7x'], 'Vmem Stores', 'tc', 'vst_instruction', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'Vmem Loads', 'tc', 'vld_instruction_', ['0', '1'], 1.0, NULL),
        (['v6e', 'v7x'], 'No MXU Busy', 'tc', 'mxu_busy_0', [''], 1.0, NULL),
        (['v6e', 'v7x'], '1 MXU Busy', 'tc', 'mxu_busy_1', [''], 1.0, NULL),
        (['v6e', 'v7x'], '2 MXU Busy', 'tc', 'mxu_busy_2', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'Avg MXU Busy', 'tc', 'mxu_busy_1', [''], 0.5, NULL),
        (['v6e', 'v7x'], 'Avg MXU Busy', 'tc', 'mxu_busy_2', [''], 1.0, NULL),
        -- MXU cycles: matmul instructions x cycles per instruction.
        (['v6e', 'v7x'], 'MXU0', 'tc', 'matmul_lmr_bf16_mxu_0', [''], 4.0, NULL),
        (['v6e', 'v7x'], 'MXU0', 'tc', 'matmul_vreg_', ['f8_mxu_0', 'bf16_mxu_0'], 8.0, NULL),
        (['v6e', 'v7x'], 'MXU0', 'tc', 'matmul_vreg_f32_mxu_0', [''], 4.0, NULL),
        (['v6e'], 'MXU0', 'tc', 'matmul_lmr_', ['i8_mxu_0', 'i4_mxu_0'], 2.0, NULL),
        (['v6e'], 'MXU0', 'tc', 'matmul_vreg_', ['i8_mxu_0', 'i4_mxu_0'], 8.0, NULL),
        (['v6e', 'v7x'], 'MXU1', 'tc', 'matmul_lmr_bf16_mxu_1', [''], 4.0, NULL),
        (['v6e', 'v7x'], 'MXU1', 'tc', 'matmul_vreg_', ['f8_mxu_1', 'bf16_mxu_1'], 8.0, NULL),
        (['v6e', 'v7x'], 'MXU1', 'tc', 'matmul_vreg_f32_mxu_1', [''], 4.0, NULL),
        (['v6e'], 'MXU1', 'tc', 'matmul_lmr_', ['i8_mxu_1', 'i4_mxu_1'], 2.0, NULL),
        (['v6e'], 'MXU1', 'tc', 'matmul_vreg_', ['i8_mxu_1', 'i4_mxu_1'], 8.0, NULL),
        (['v6e', 'v7x'], 'MXU BF16', 'tc', 'matmul_lmr_bf16_mxu_', ['0', '1'], 4.0, NULL),
        (['v6e', 'v7x'], 'MXU BF16', 'tc', 'matmul_vreg_bf16_mxu_', ['0', '1'], 8.0, NULL),
        (['v6e', 'v7x'], 'MXU BF16', 'tc', 'matmul_vreg_f32_mxu_', ['0', '1'], 4.0, NULL),
        (['v6e'], 'MXU BF16', 'tc', 'matmul_vreg_f8_mxu_', ['0', '1'], 8.0, NULL),
        (['v6e'], 'MXU I8', 'tc', 'matmul_lmr_i8_mxu_', ['0', '1'], 2.0, NULL),
        (['v6e'], 'MXU I8', 'tc', 'matmul_vreg_i8_mxu_', ['0', '1'], 8.0, NULL),
        (['v6e'], 'MXU I4', 'tc', 'matmul_lmr_i4_mxu_', ['0', '1'], 2.0, NULL),
        (['v6e'], 'MXU I4', 'tc', 'matmul_vreg_i4_mxu_', ['0', '1'], 8.0, NULL),
        (['v7x'], 'MXU E4M3 + E5M2', 'tc', 'matmul_vreg_f8_mxu_', ['0', '1'], 8.0, NULL),
        (['v6e', 'v7x'], 'MXU matpush', 'tc', 'matpush_cycles_mxu_', ['0', '1'], 1.0, NULL),
        (['v6e', 'v7x'], 'No XLU Busy', 'tc', 'xlu_busy_0', [''], 1.0, NULL),
        (['v6e', 'v7x'], '1 XLU Busy', 'tc', 'xlu_busy_1', [''], 1.0, NULL),
        (['v6e', 'v7x'], '2 XLUs Busy', 'tc', 'xlu_busy_2', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'Avg XLU Busy', 'tc', 'xlu_busy_1', [''], 0.5, NULL),
        (['v6e', 'v7x'], 'Avg XLU Busy', 'tc', 'xlu_busy_2', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'XLU0', 'tc', '',
            ['packed_xlu_0', 'rotate_permute_instruction_xlu_0', 'rotate_permute_set_instruction_xlu_0',
             'transpose_xlu_0'], 1.0, NULL),
        (['v6e', 'v7x'], 'XLU1', 'tc', '',
            ['packed_xlu_1', 'rotate_permute_instruction_xlu_1', 'rotate_permute_set_instruction_xlu_1',
             'transpose_xlu_1'], 1.0, NULL),
        -- 32-byte beats; the '_ps0/_ps1' pseudo-channel suffix is stripped from the key.
        (['v6e', 'v7x'], 'HBM Read', 'hbm', 'rd_resp', [''], 32.0, NULL),
        (['v6e', 'v7x'], 'HBM Write', 'hbm', '', ['wr_req', 'partial_write_req'], 32.0, NULL),
        -- 128-byte flits.
        (['v6e'], 'ICI (Read)', 'oci', 'bn_rd_req_', ['0_insertion_count', '1_insertion_count'], 128.0, NULL),
        (['v6e'], 'ICI (Write)', 'oci', 'bn_wr_req_', ['0_insertion_count', '1_insertion_count'], 128.0, NULL),
        (['v7x'], 'ICI (Read)', 'oci', 'bn_rd_req_0_insertion_count', [''], 128.0, 1),
        (['v7x'], 'ICI (Write)', 'oci', 'bn_wr_req_0_insertion_count', [''], 128.0, 1),
        (['v6e', 'v7x'], 'TEC Scalar Issue', 'sct', 'tec_scalar_issue', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'TEC Scalar Issue: S0 slot', 'sct', 'tec_s0_instruction', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'TEC Scalar Issue: S1 slot', 'sct', 'tec_s1_instruction', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'TEC Scalar Issue: Smisc slot', 'sct', 'tec_smisc_instruction', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'SC Vector Issue', 'sct', 'vector_issue', [''], 1.0, NULL),
        (['v6e'], 'SC Vector Issue:V0 Slot', 'sct', 'v0_instruction', [''], 1.0, NULL),
        (['v7x'], 'SC Vector Issue: V0 Slot', 'sct', 'v0_instruction', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'SC Vector Issue: V1 Slot', 'sct', 'v1_instruction', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'SC Vector Issue: V2 Slot', 'sct', 'v2_instruction', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'SC Vector Issue: VLD Slot', 'sct', 'vld_instruction', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'SC Vector Issue: VST Slot', 'sct', 'vst_instruction', [''], 1.0, NULL),
        (['v6e'], 'SC Vector Issue:VEX Slot', 'sct', 'vex_instruction', [''], 1.0, NULL),
        (['v7x'], 'SC Vector Issue: VEX Slot', 'sct', 'vex_instruction', [''], 1.0, NULL),
        (['v6e'], 'SC Vector Issue:VRES Slot', 'sct', 'vres_instruction', [''], 1.0, NULL),
        (['v7x'], 'SC Vector Issue: VRES Slot', 'sct', 'vres_instruction', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'SCS Scalar Issue', 'scs', 'scalar_issue', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'SCS: S0 Slot', 'scs', 's0_instruction', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'SCS: S1 Slot', 'scs', 's1_instruction', [''], 1.0, NULL),
        (['v6e', 'v7x'], 'SCS: Smisc Slot', 'scs', 'smisc_instruction', [''], 1.0, NULL)
),
terms AS (  -- two unnests in one SELECT would zip, not cross: one per level
    SELECT generation, metric, domain, prefix || unnest(suffixes) AS key, weight, die
    FROM (SELECT *, unnest(generations) AS generation FROM term_families)
),
-- Achieved per sample and node: sum of weight x value over the metric's counters.
-- SparseCore vector slots count on the SCTC tiles of v7x and every tile of v6e.
achieved AS (
    SELECT
        u.profile_id, u.device_id, u.kernel, u.sample, t.metric,
        CASE WHEN u.domain IN ('sct', 'scs') THEN u.sc_node WHEN u.domain = 'oci' THEN 0 ELSE u.die END AS node,
        sum(t.weight * u.value) AS achieved
    FROM units AS u
    JOIN terms AS t ON t.generation = u.generation AND t.domain = u.domain AND t.key = u.key
        AND (t.die IS NULL OR t.die = u.die)
        AND (u.domain <> 'sct' OR u.generation = 'v6e'
             OR u.sub = CASE WHEN t.metric LIKE 'TEC%' THEN 'd' ELSE 'c' END)
    GROUP BY ALL
),
-- Peaks: one row per (sample, node, metric) the tool writes.
tc_rows AS (
    SELECT s.*, dc.die AS node, m.metric, m.unit,
        CASE m.base
            WHEN 'cycles' THEN m.multiplier * tc.cycles
            ELSE floor(tc.cycles / k.cycles_per_xlu)
        END AS peak
    FROM samples AS s
    JOIN die_cycles AS dc USING (profile_id, device_id, kernel, sample)
    CROSS JOIN LATERAL (SELECT CASE s.generation WHEN 'v6e' THEN dc.count_cycles ELSE dc.pwr_cycles END AS cycles) AS tc
    JOIN constants AS k USING (generation)
    JOIN metrics AS m ON m.scope = 'tc' AND list_contains(m.generations, s.generation)
    WHERE tc.cycles > 0 AND (s.generation = 'v7x' OR dc.die = 0)
),
hbm_bytes AS (
    SELECT
        s.*, dc.die,
        coalesce(rd.achieved, 0) AS read_bytes,
        coalesce(wr.achieved, 0) AS write_bytes,
        k.peak_hbm_bytes_per_s * dc.count_cycles / k.frequency_hz AS peak
    FROM samples AS s
    JOIN die_cycles AS dc USING (profile_id, device_id, kernel, sample)
    JOIN constants AS k USING (generation)
    LEFT JOIN achieved AS rd ON rd.profile_id = s.profile_id AND rd.device_id = s.device_id
        AND rd.kernel IS NOT DISTINCT FROM s.kernel AND rd.sample IS NOT DISTINCT FROM s.sample
        AND rd.node = dc.die AND rd.metric = 'HBM Read'
    LEFT JOIN achieved AS wr ON wr.profile_id = s.profile_id AND wr.device_id = s.device_id
        AND wr.kernel IS NOT DISTINCT FROM s.kernel AND wr.sample IS NOT DISTINCT FROM s.sample
        AND wr.node = dc.die AND wr.metric = 'HBM Write'
    WHERE dc.count_cycles > 0 AND (s.generation = 'v7x' OR dc.die = 0)
),
hbm_rows AS (
    SELECT * EXCLUDE (die, read_bytes, write_bytes, peak), 0 AS node, 'HBM Rd+Wr - core ' || die AS metric,
        'bytes' AS unit, read_bytes + write_bytes AS achieved, peak
    FROM hbm_bytes
    UNION ALL BY NAME
    SELECT * EXCLUDE (die, read_bytes, write_bytes, peak), die AS node, 'HBM Read Ratio' AS metric,
        'percent' AS unit, read_bytes AS achieved, read_bytes + write_bytes AS peak
    FROM hbm_bytes WHERE read_bytes + write_bytes > 0
    UNION ALL BY NAME
    SELECT * EXCLUDE (die, read_bytes, write_bytes, peak), die AS node, 'HBM Write Ratio' AS metric,
        'percent' AS unit, write_bytes AS achieved, read_bytes + write_bytes AS peak
    FROM hbm_bytes WHERE read_bytes + write_bytes > 0
),
ici_rows AS (
    SELECT s.*, 0 AS node, m.metric, m.unit, 294947368421.0526 * ic.cycles / 1e9 AS peak
    FROM samples AS s
    JOIN die_cycles AS dc USING (profile_id, device_id, kernel, sample)
    CROSS JOIN LATERAL (SELECT CASE s.generation WHEN 'v6e' THEN dc.count_cycles ELSE dc.pwr_cycles END AS cycles) AS ic
    JOIN metrics AS m ON m.scope = 'ici' AND list_contains(m.generations, s.generation)
    WHERE dc.die = 0 AND ic.cycles > 0
),
sc_rows AS (
    SELECT s.*, sc.sc_node AS node, m.metric, m.unit,
        m.multiplier * CASE m.base WHEN 'tile_cycles' THEN sc.tile_cycles ELSE sc.scs_cycles END AS peak
    FROM samples AS s
    JOIN sc_cycles AS sc USING (profile_id, device_id, kernel, sample)
    JOIN metrics AS m ON m.scope IN ('sct', 'scs') AND list_contains(m.generations, s.generation)
    WHERE CASE m.base WHEN 'tile_cycles' THEN sc.tile_cycles ELSE sc.scs_cycles END IS NOT NULL
),
peaked AS (
    SELECT * FROM tc_rows
    UNION ALL BY NAME SELECT * FROM ici_rows
    UNION ALL BY NAME SELECT * FROM sc_rows
)
SELECT
    p.profile_id, p.device_id, p.chip, p.generation, p.kernel, p.sample, p.start_ps, p.end_ps,
    p.node, p.metric, coalesce(a.achieved, 0) AS achieved, p.peak, p.unit,
    coalesce(a.achieved, 0) / nullif(p.peak, 0) AS utilization
FROM peaked AS p
LEFT JOIN achieved AS a ON a.profile_id = p.profile_id AND a.device_id = p.device_id
    AND a.kernel IS NOT DISTINCT FROM p.kernel AND a.sample IS NOT DISTINCT FROM p.sample
    AND a.node = p.node AND a.metric = p.metric
UNION ALL BY NAME
SELECT
    profile_id, device_id, chip, generation, kernel, sample, start_ps, end_ps, node, metric, achieved, peak, unit,
    achieved / nullif(peak, 0) AS utilization
FROM hbm_rows
ORDER BY profile_id, device_id, sample, node, metric
