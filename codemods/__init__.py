"""gradfix's codemods, one per file; :data:`ALL_RULES` lists them in code order."""

from __future__ import annotations

from gradfix.codemods.backward_twice import BackwardTwice
from gradfix.codemods.cat_in_loop import CatInLoop
from gradfix.codemods.create_graph_backward import CreateGraphBackward
from gradfix.codemods.data_mutation import DataMutation
from gradfix.codemods.inplace_on_saved import InplaceOnSaved
from gradfix.codemods.integer_requires_grad import IntegerRequiresGrad
from gradfix.codemods.leaf_inplace import LeafInplace
from gradfix.codemods.leaf_rebinding import LeafRebinding
from gradfix.codemods.loss_accumulation import LossAccumulation
from gradfix.codemods.masked_unsafe_branch import MaskedUnsafeBranch
from gradfix.codemods.missing_zero_grad import MissingZeroGrad
from gradfix.codemods.nonleaf_grad_read import NonleafGradRead
from gradfix.codemods.nonleaf_parameter import NonleafParameter
from gradfix.codemods.plain_module_container import PlainModuleContainer
from gradfix.codemods.row_loop_inplace import RowLoopInplace
from gradfix.codemods.self_referencing_index_assign import SelfReferencingIndexAssign
from gradfix.codemods.sqrt_of_squares import SqrtOfSquares
from gradfix.codemods.tensor_copy_construct import TensorCopyConstruct
from gradfix.codemods.tensor_from_tensors import TensorFromTensors
from gradfix.codemods.view_alias_mutation import ViewAliasMutation
from gradfix.codemods.where_unsafe_branch import WhereUnsafeBranch

ALL_RULES = sorted(
    [
        TensorFromTensors,
        TensorCopyConstruct,
        IntegerRequiresGrad,
        LeafInplace,
        InplaceOnSaved,
        ViewAliasMutation,
        DataMutation,
        LeafRebinding,
        MaskedUnsafeBranch,
        NonleafGradRead,
        NonleafParameter,
        PlainModuleContainer,
        WhereUnsafeBranch,
        SelfReferencingIndexAssign,
        RowLoopInplace,
        BackwardTwice,
        CreateGraphBackward,
        LossAccumulation,
        CatInLoop,
        MissingZeroGrad,
        SqrtOfSquares,
    ],
    key=lambda rule: rule.code,
)

__all__ = ["ALL_RULES"]
